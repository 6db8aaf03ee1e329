"""What :func:`lerobot_zarr.writing.export.push` does on the Hub: checks before anything is exported, one commit,
the tag.

:class:`Publisher` for one repo and branch:

1. :meth:`~Publisher.check` (before the export): a token is there and the Hub accepts it (``whoami``), the repo
   exists (else it is created, empty) and the token may write to it (``auth-check/write``); the branch's head, its
   files and its ``meta/info.json`` are read.
2. :meth:`~Publisher.check_same_dataset`: the branch holds nothing or a dataset with the same features, fps and
   robot type (before the export with what the store will export, after it with the exported ``info.json``).
3. :meth:`~Publisher.publish`: one commit of the files that differ from the branch's (its parent checked, so a
   concurrent change fails it whole), then tag ``v3.0`` moved to the new head: deleted and created again (the Hub
   cannot move a tag); if creating fails, the old tag is put back where possible.

Every failure raises :class:`HubAuthError` (401/403), :class:`HubError` or :class:`SourceMismatchError` whose
message says what the remote holds then ("the remote is unchanged", "main moved to <sha>; tag v3.0 is missing; run
push again to retag"). Running push again completes a push that failed after its commit: it finds nothing to
upload and moves the tag. All requests have timeouts (:mod:`lerobot_zarr.hub.http`); the reads go through the same
wrapped ``HfApi`` calls and listing as opening a dataset (:mod:`lerobot_zarr.hub.revisions`); huggingface_hub's
progress bars follow ``progress``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import HubAuthError, HubError, LeRobotZarrError, SourceMismatchError
from ..lerobot.index_file import identity
from .files import fetch_file
from .http import (
    Retry,
    Where,
    bounded_answers,
    call_api,
    check_commit,
    hf_api,
    hub_endpoint,
    network_errors,
    session_timeouts,
)
from .revisions import list_tree, refs

__all__ = ["Publisher", "TAG"]

TAG = "v3.0"
_SAME_DATASET_KEYS = ("features", "fps", "robot_type")


class _Failed(Exception):
    """A huggingface_hub call that failed: what we were doing, and why."""

    def __init__(self, what: str, cause: BaseException):
        super().__init__(what)
        self.what, self.cause = what, cause
        response = getattr(cause, "response", None)
        self.status = getattr(cause, "status", None) or getattr(response, "status_code", None)
        self.response = response


class Publisher:
    """Pushes a LeRobot v3.0 folder to ``repo_id`` on ``branch`` (see the module docstring)."""

    def __init__(self, repo_id: str, *, branch: str = "main", token: str | bool | None = None,
                 private: bool | None = False, progress: bool = True):
        self.repo_id, self.branch, self.token, self.private, self.progress = repo_id, branch, token, private, progress
        self.endpoint = hub_endpoint()
        self.api = hf_api(self.endpoint, token)
        self.created = False
        self.head: str | None = None  # the branch's commit before the push (None: no such branch yet)
        self.base: str | None = None  # the commit the push builds on (the branch's, or main's for a new branch)
        self.tag: str | None = None  # where v3.0 points before the push
        self.remote: dict[str, str] = {}  # path -> oid of the base's files
        self.remote_info: dict | None = None
        self._local: dict[str, dict[str, str]] = {}  # path -> ids of the files being pushed

    # ------------------------------------------------------------------------------------------------ checks
    def check(self, *, create: bool = True) -> None:
        """Token, repo, write access and the branch's state: everything that can fail before the export. A missing
        repo is created (empty), unless ``create`` is False (a check made before changing the store, which
        changes nothing anywhere: the push that follows creates it)."""
        where = Where(self.repo_id, self.branch)
        token = self.token = self._token()  # resolved once: the same token for every call of this push
        self.api = hf_api(self.endpoint, token)
        try:
            me = call_api(where, self.api.whoami, token=token)
        except HubAuthError as exc:
            raise self._auth("the Hub refused the token", exc) from exc
        role = (((me or {}).get("auth") or {}).get("accessToken") or {}).get("role") if isinstance(me, dict) else None
        if role == "read":
            raise HubAuthError(f"{self.repo_id}: the token is read-only; push needs a token with write access; "
                               f"the remote is unchanged", repo_id=self.repo_id)
        try:
            call_api(where, self.api.auth_check, self.repo_id, repo_type="dataset", write=True, token=token)
        except HubAuthError as exc:
            raise self._auth("the token may not write to this repo", exc) from exc
        except LeRobotZarrError as exc:
            if not isinstance(exc, FileNotFoundError):  # RepoNotFoundError: created below
                raise self._unchanged("checking write access", exc) from exc
            if not create:
                return  # nothing there to compare with: the push creates the repo
            try:
                self._hf("creating the repo", self.api.create_repo, self.repo_id, repo_type="dataset",
                         private=self.private, exist_ok=True)
            except _Failed as failure:
                raise self._error(failure, "the remote is unchanged") from failure.cause
            self.created = True
        self._read_state(token)

    def _token(self) -> str:
        from huggingface_hub.utils import build_hf_headers

        try:
            headers = build_hf_headers(token=self.token)
        except Exception as exc:  # huggingface_hub's "no token found" (token=True without a login)
            raise self._auth("no token", exc) from exc
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        if not auth.lower().startswith("bearer ") or not auth[7:].strip():
            raise HubAuthError(f"{self.repo_id}: push needs a Hub token with write access: pass token= or log in "
                               f"with `hf auth login` (or set HF_TOKEN); the remote is unchanged",
                               repo_id=self.repo_id)
        return auth[7:].strip()

    def _read_state(self, token: str) -> None:
        where = Where(self.repo_id, self.branch)
        try:
            branches, tags = refs(self.repo_id, token=token, endpoint=self.endpoint, revision=self.branch)
            if self.branch in branches:
                self.head = check_commit(branches[self.branch], where, self.branch)
            self.base = self.head or (check_commit(branches["main"], where, "main") if "main" in branches else None)
            self.tag = check_commit(tags[TAG], where, TAG) if TAG in tags else None
            if self.base is not None:
                self.remote = self._files_at(self.base)
            if "meta/info.json" in self.remote:
                self.remote_info = _json_object(fetch_file(self.repo_id, self.base, "meta/info.json", token=token,
                                                           endpoint=self.endpoint, revision=self.branch))
        except LeRobotZarrError as exc:
            raise self._unchanged("reading the repo's state", exc) from exc

    def _files_at(self, commit: str) -> dict[str, str]:
        """path -> oid (sha256 of LFS files, git blob sha1 of the others) of the files at ``commit``."""
        files = {}
        for entry in list_tree(self.repo_id, commit, token=self.token, endpoint=self.endpoint):
            if isinstance(entry, dict) and entry.get("type") == "file" and isinstance(entry.get("path"), str):
                lfs = entry.get("lfs")
                files[entry["path"]] = str((lfs if isinstance(lfs, dict) else {}).get("oid") or entry.get("oid") or "")
        return files

    def check_same_dataset(self, info: Mapping[str, Any]) -> None:
        """Refuse (:class:`SourceMismatchError`) a branch holding a dataset with other features, fps or robot type
        than ``info``."""
        theirs = self.remote_info
        if theirs is None:
            if "meta/info.json" in self.remote:
                raise SourceMismatchError(f"{self.repo_id}: the repo's meta/info.json is not a JSON object; refusing "
                                          f"to overwrite what it holds; the remote is unchanged")
            return
        for key in _SAME_DATASET_KEYS:
            if theirs.get(key) != info.get(key):
                difference = _difference(key, theirs.get(key), info.get(key))
                raise SourceMismatchError(f"{self.repo_id}: the repo holds another dataset ({difference}); push to "
                                          f"another repo or branch; the remote is unchanged")

    # ------------------------------------------------------------------------------------------------ publish
    def publish(self, folder: Path, commit_message: str | None, *, tag: bool = True,
                keep: Callable[[str], bool] | None = None) -> str | None:
        """Commit the files of ``folder`` that differ from the branch's (and delete the branch's stale LeRobot
        files), then point tag v3.0 at the head (unless ``tag`` is False). ``keep``: which paths may be uploaded or
        removed (None: all). Returns the new commit, or None if nothing changed."""
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete

        local = {p.relative_to(folder).as_posix(): identity(p) for p in sorted(folder.rglob("*")) if p.is_file()}
        changed = [rel for rel, ids in local.items() if self.remote.get(rel) not in ids.values()]
        stale = [rel for rel in self.remote if rel.startswith(("data/", "meta/", "videos/")) and rel not in local]
        if keep is not None:
            changed, stale = [rel for rel in changed if keep(rel)], [rel for rel in stale if keep(rel)]
        self._local = local
        new = None
        if changed or stale or self.head is None:
            if self.head is None and self.base is not None and self.branch != "main":
                try:
                    self._hf("creating the branch", self.api.create_branch, self.repo_id, branch=self.branch,
                             revision=self.base, repo_type="dataset", exist_ok=True)
                except _Failed as failure:
                    raise self._error(failure, "the remote is unchanged") from failure.cause
            ops = [CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(folder / rel)) for rel in changed]
            ops += [CommitOperationDelete(path_in_repo=rel) for rel in stale]
            try:
                info = self._hf("committing", self.api.create_commit, self.repo_id, ops, repo_type="dataset",
                                revision=self.branch, parent_commit=self.base,
                                commit_message=commit_message or f"lerobot_zarr: {len(changed)} files")
            except _Failed as failure:
                raise self._after_commit_failure(failure) from failure.cause
            new = check_commit(info.oid, Where(self.repo_id, self.branch), self.branch)
        if tag:
            self._retag(new or self.head or self.base, moved=new is not None)
        return new

    def _retag(self, tip: str | None, *, moved: bool) -> None:
        """Point v3.0 at ``tip``: delete, then create; a failed create puts the old tag back where it can."""
        if tip is None or self.tag == tip:
            return
        state = f"{self.branch} moved to {tip}" if moved else f"{self.branch} is at {tip}"
        if self.tag is not None:
            try:
                self._hf("deleting the old tag", self.api.delete_tag, self.repo_id, tag=TAG, repo_type="dataset")
            except _Failed as failure:
                raise self._error(failure, f"{state}; tag {TAG} still points at {self.tag}; run push again to "
                                           f"retag") from failure.cause
        try:
            self._hf("tagging", self.api.create_tag, self.repo_id, tag=TAG, revision=tip, repo_type="dataset")
        except _Failed as failure:
            restored = False
            if self.tag is not None:
                try:
                    self._hf("restoring the old tag", self.api.create_tag, self.repo_id, tag=TAG, revision=self.tag,
                             repo_type="dataset")
                    restored = True
                except _Failed:
                    pass
            where_tag = f"tag {TAG} still points at {self.tag}" if restored else f"tag {TAG} is missing"
            raise self._error(failure, f"{state}; {where_tag}; run push again to retag") from failure.cause

    # ------------------------------------------------------------------------------------------------ errors
    def _hf(self, what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """A huggingface_hub call with timeouts on its session and this push's progress setting."""
        from huggingface_hub import errors as hf

        failures = (hf.HfHubHTTPError, hf.OfflineModeIsEnabled, Retry, HubError, *network_errors())
        try:
            # huggingface_hub's upload bars redraw with terminal escapes: only on a terminal, never into a log
            with (session_timeouts(), bounded_answers(Where(self.repo_id, self.branch)),
                  quiet_progress(not self.progress or not sys.stderr.isatty())):
                return fn(*args, **kwargs)
        except failures as exc:
            raise _Failed(what, exc) from exc
        except RuntimeError as exc:  # huggingface_hub wraps a failed LFS upload: "Error while uploading 'x'"
            if isinstance(exc.__cause__, failures):
                raise _Failed(f"{what} ({exc})", exc.__cause__) from exc
            raise

    def _error(self, failure: _Failed | LeRobotZarrError, state: str) -> LeRobotZarrError:
        what = f"failed {failure.what}" if isinstance(failure, _Failed) else "failed"
        cause = failure.cause if isinstance(failure, _Failed) else failure
        status = getattr(failure, "status", None)
        cls = HubAuthError if status in (401, 403) or isinstance(cause, PermissionError) else HubError
        detail = f"HTTP {status}: {cause}" if status and str(status) not in str(cause) else str(cause)
        return cls(f"{self.repo_id}: push {what} ({detail}); {state}", repo_id=self.repo_id, revision=self.branch,
                   status=status, response=getattr(failure, "response", None))

    def _unchanged(self, what: str, cause: BaseException) -> LeRobotZarrError:
        if isinstance(cause, LeRobotZarrError) and not isinstance(cause, (HubError, HubAuthError)):
            return cause  # RepoNotFound / RevisionNotFound... as they are
        state = "the repo was created, empty" if self.created else "the remote is unchanged"
        return self._error(_Failed(what, cause), state)

    def _auth(self, why: str, cause: BaseException) -> HubAuthError:
        status = getattr(cause, "status", None)
        return HubAuthError(f"{self.repo_id}: push needs a Hub token with write access and {why}"
                            f"{f' (HTTP {status})' if status else ''}: pass another token (token=, or --token on the "
                            f"command line) or log in with `hf auth login`; the remote is unchanged",
                            repo_id=self.repo_id, status=status)

    def _after_commit_failure(self, failure: _Failed) -> LeRobotZarrError:
        """What the remote holds after a failed commit, read back: unchanged; or our commit went through before the
        error (its answer lost: the branch's files are ours); or another commit moved the branch meanwhile."""
        where = Where(self.repo_id, self.branch)
        try:
            now = refs(self.repo_id, token=self.token, endpoint=self.endpoint, revision=self.branch)[0].get(self.branch)
            if now == self.head or now is None:
                state = "the remote is unchanged" + (" (the repo was created, empty)" if self.created else "")
                return self._error(failure, state)
            now = check_commit(now, where, self.branch)
            theirs = self._files_at(now)
        except Exception:
            return self._error(failure, f"the remote could not be read back: {self.branch} is at {self.head} or at "
                                        f"a new commit; run push again")
        ours = all(theirs.get(rel) in ids.values() for rel, ids in self._local.items())
        if not ours:
            return self._error(failure, f"{self.branch} moved to {now} by another commit meanwhile, nothing of this "
                                        f"push was committed; run push again")
        return self._error(failure, f"{self.branch} moved to {now} (the commit went through, its answer was lost); "
                                    f"tag {TAG} " + (f"still points at {self.tag}" if self.tag else "is missing")
                                    + "; run push again to retag")


def _difference(key: str, theirs: Any, ours: Any) -> str:
    """What differs between the repo's and the store's ``key`` of info.json, in a few words (features by name)."""
    if key != "features" or not isinstance(theirs, Mapping) or not isinstance(ours, Mapping):
        return f"{key}: {str(theirs)[:80]!s} there, {str(ours)[:80]!s} here"

    def names(keys: Any) -> str:
        keys = sorted(keys)
        return f"{keys[:5]}{f' and {len(keys) - 5} more' if len(keys) > 5 else ''}"

    parts = []
    if set(theirs) - set(ours):
        parts.append(f"only there: {names(set(theirs) - set(ours))}")
    if set(ours) - set(theirs):
        parts.append(f"only here: {names(set(ours) - set(theirs))}")
    for name in sorted(set(theirs) & set(ours)):
        a, b = theirs[name], ours[name]
        if a != b:
            fields = [f for f in ("dtype", "shape", "names", "info") if not isinstance(a, Mapping)
                      or not isinstance(b, Mapping) or a.get(f) != b.get(f)]
            shown = ", ".join(f"{f} {str(a.get(f))[:40]} there, {str(b.get(f))[:40]} here" for f in fields[:2]
                              if isinstance(a, Mapping) and isinstance(b, Mapping))
            parts.append(f"{name!r} differs ({shown or 'its description'})")
            if len(parts) >= 4:
                break
    return "features differ: " + "; ".join(parts)


def _json_object(body: bytes) -> dict | None:
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


@contextlib.contextmanager
def quiet_progress(quiet: bool) -> Iterator[None]:
    """huggingface_hub's progress bars off while the block runs when ``quiet``; its settings are put back after
    (they are process-wide: a bar another thread opens meanwhile is hidden too)."""
    if not quiet:
        yield
        return
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    states = getattr(sys.modules.get("huggingface_hub.utils.tqdm"), "progress_bar_states", None)
    saved = dict(states) if isinstance(states, dict) else None
    was_disabled = are_progress_bars_disabled()
    with contextlib.suppress(Exception), _no_warnings():
        disable_progress_bars()
    try:
        yield
    finally:
        if saved is not None:
            states.clear()
            states.update(saved)
        elif not was_disabled:
            with contextlib.suppress(Exception), _no_warnings():
                enable_progress_bars()


@contextlib.contextmanager
def _no_warnings() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
