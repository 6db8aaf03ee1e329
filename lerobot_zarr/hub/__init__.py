"""Hub I/O: revisions, listings and the range reader with its deadlines (:mod:`.client`); publishing a dataset in
one commit (:mod:`.publish`)."""

from .client import HubFiles, parse_repo_id, resolve_revision

__all__ = ["HubFiles", "parse_repo_id", "resolve_revision"]
