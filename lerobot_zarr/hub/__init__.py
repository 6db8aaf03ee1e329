"""Hub I/O: revisions, listings and the range reader with its deadlines (:mod:`.client`); publishing a dataset in
one commit (:mod:`.publish`)."""

from ..utils.lazy import lazy_face

__all__ = ["HubFiles", "parse_repo_id", "resolve_revision"]

__getattr__, __dir__ = lazy_face(__name__, {
    "HubFiles": "client", "parse_repo_id": "client", "resolve_revision": "client"
})
