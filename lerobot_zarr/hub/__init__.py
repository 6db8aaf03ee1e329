"""Hub I/O: one request with bounded waits, retries and our errors, also around ``HfApi`` calls (:mod:`.http`);
which commit a revision names and what a repo holds (:mod:`.revisions`); the range reader (:mod:`.files`);
publishing a dataset in one commit (:mod:`.publish`)."""

from ..utils.lazy import lazy_face

__all__ = ["HubFiles", "parse_repo_id", "resolve_revision"]

__getattr__, __dir__ = lazy_face(__name__, {
    "HubFiles": "files", "parse_repo_id": "http", "resolve_revision": "revisions"
})
