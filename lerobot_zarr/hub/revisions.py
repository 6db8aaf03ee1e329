"""Which commit a revision names, the way LeRobot picks one, and what a repo holds at a commit.

A commit's info goes through huggingface_hub's ``HfApi`` (``dataset_info``) wrapped by
:func:`~lerobot_zarr.hub.http.call_api`. Refs and the tree listing are our own requests (refs: every open makes
that call, and ``HfApi``'s module costs ~0.1 s of imports; the listing: see :func:`list_tree`).
Trust: nothing the server sends becomes a local path unchecked: commits must be 40-hex shas
(:func:`~lerobot_zarr.hub.http.check_commit`), and pagination links must stay on the endpoint (they are sent the
token).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, urlsplit

from ..errors import HubError, RevisionNotFoundError
from .http import Where, call_api, check_commit, hf_api, hub_endpoint, request_json, request_timeout, short

__all__ = ["list_tree", "refs", "resolve_revision"]

_SHA = re.compile(r"^[0-9a-f]{40}$")
_MAX_PAGES = 10_000


def refs(repo_id: str, *, token: str | bool | None = None, endpoint: str | None = None,
         revision: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """``(branches, tags)`` of a dataset repo, each ``{name: target commit}`` (commits are checked when used);
    ``revision`` only names the request in errors."""
    where = Where(repo_id, revision)
    _, answer = request_json(f"{hub_endpoint(endpoint)}/api/datasets/{repo_id}/refs", where, token=token, small=True)
    out: tuple[dict[str, str], dict[str, str]] = ({}, {})
    for kind, names in zip(("branches", "tags"), out, strict=True):
        listed = answer.get(kind, []) if isinstance(answer, dict) else None
        if not isinstance(listed, list):
            raise HubError(f"{where}: the refs answer has no list of {kind}", **where.fields())
        for ref in listed:
            name = ref.get("name") if isinstance(ref, dict) else None
            if not isinstance(name, str):
                raise HubError(f"{where}: a ref of {kind} without a name ({short(ref)})", **where.fields())
            names[name] = ref.get("targetCommit")
    return out


def resolve_revision(repo_id: str, revision: str | None = None, *, token: str | bool | None = None,
                     endpoint: str | None = None) -> tuple[str, str]:
    """``(revision, commit sha)``. Without a revision, like LeRobot: tag ``v3.0`` if present, else the highest
    ``v3.x`` tag, else the highest ``v2.x`` tag (which we read too), else the main branch."""
    where = Where(repo_id, revision)
    branches, tags = refs(repo_id, token=token, endpoint=endpoint, revision=revision)
    if revision is None:
        revision = _default_revision(tags) or ("main" if "main" in branches else next(iter(branches), None))
        if revision is None:
            raise RevisionNotFoundError(f"{repo_id}: repository has no branch and no version tag")
        where = Where(repo_id, revision)
    if revision in tags:
        return revision, check_commit(tags[revision], where, revision)
    if revision in branches:
        return revision, check_commit(branches[revision], where, revision)
    if not _SHA.match(revision):
        raise RevisionNotFoundError(f"{repo_id}: revision {revision!r} is neither a branch, a tag nor a commit "
                                    f"(tags: {sorted(tags)}, branches: {sorted(branches)})")
    api = hf_api(endpoint, token)
    info = call_api(where, api.dataset_info, repo_id, revision=revision, token=token,
                    timeout=request_timeout("api"))
    return revision, check_commit(getattr(info, "sha", None), where, revision)


def _default_revision(tags: Iterable[str]) -> str | None:
    versions = []
    for tag in tags:
        m = re.fullmatch(r"v(\d+)\.(\d+)", tag)
        if m:
            versions.append((int(m.group(1)), int(m.group(2)), tag))
    for major in (3, 2):
        same = sorted(v for v in versions if v[0] == major)
        if (3, 0, "v3.0") in same:
            return "v3.0"
        if same:
            return same[-1][2]
    return None


def list_tree(repo_id: str, revision: str, *, token: str | bool | None = None,
              endpoint: str | None = None) -> list[dict]:
    """Every entry of a repo's tree at ``revision`` (``/tree?recursive=true``, following its pages).

    Our request, not ``HfApi.list_repo_tree``: its pagination follows a ``Link`` to any host and sends it the
    token (we refuse a link off the endpoint, :func:`_next_link`, tested by the Hub hardening tests); it retries each
    page with its own backoff (1 s, five times) under ours; and it reads each page without a size limit or total
    deadline."""
    base = hub_endpoint(endpoint)
    where = Where(repo_id, revision)
    url: str | None = f"{base}/api/datasets/{repo_id}/tree/{quote(revision, safe='')}"
    params: dict | None = {"recursive": "true", "expand": "false"}
    entries: list = []
    for _ in range(_MAX_PAGES):
        response, page = request_json(url, where, token=token, params=params)
        if not isinstance(page, list):
            raise HubError(f"{where}: the tree listing is not a list", **where.fields())
        entries += page
        url, params = _next_link(response.headers.get("link"), base, where), None
        if url is None:
            return entries
    raise HubError(f"{where}: the tree listing has more than {_MAX_PAGES} pages", **where.fields())



def _next_link(link: str | None, base: str, where: Where) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header, refused unless on the endpoint ``base`` (it is sent the
    token)."""
    if not link:
        return None
    for part in link.split(","):
        m = re.fullmatch(r'\s*<([^>]*)>\s*;\s*rel="?next"?\s*', part)
        if m:
            url, home = urlsplit(m.group(1)), urlsplit(base)
            if (url.scheme, url.netloc) != (home.scheme, home.netloc):
                raise HubError(f"{where}: the tree listing links to {short(m.group(1))}, outside {base}",
                               **where.fields())
            return m.group(1)
    return None
