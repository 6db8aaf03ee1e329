"""A Hub dataset repo: the revision resolved to a commit, under the ``HF_HUB_OFFLINE`` rule, in this one place.

Online, a revision (default: LeRobot's choice, tag ``v3.0``...) is resolved by the Hub and recorded in the cache
(``hub/<org>--<name>/refs/<revision>``); offline, the commit it last resolved to on this machine is used, and
nothing is asked of the Hub: reading the repo's files is refused (what the local store holds is served). Stores of
the cache: ``hub/<org>--<name>/<commit>`` (a commit, not the name it was reached by: ``main`` and ``v3.0`` at the
same commit share one).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from ..errors import HubError, NotMaterializedError
from ..hub.http import REPO_ID, parse_repo_id
from .base import Source, register
from .home import cache_home
from .local import near_miss

__all__ = ["HubSource", "HUB_PREFIX", "NOT_ORGS", "ref_path", "read_ref", "record_ref"]

HUB_PREFIX = "hf://datasets/"  # the Hub's own spelling of a dataset repo, for a repo id that looks like a local path
NOT_ORGS = frozenset({"api", "datasets", "models", "spaces"})  # namespaces the Hub reserves: such a name is a path


def _is_offline() -> bool:
    from huggingface_hub import constants

    return constants.is_offline_mode()


@register
class HubSource(Source):
    """A Hub dataset repo ``org/name`` at a revision (``hf://datasets/org/name`` too)."""

    kind = "hub"
    record_kind = "hub"
    cache_folder = "hub"

    def __init__(self, repo_id: str, *, revision: str | None = None, token: str | bool | None = None,
                 commit: str | None = None):
        self.repo_id = parse_repo_id(repo_id)
        self.revision, self.token = revision, token
        self.commit = commit  # resolved by resolve(), or given (a store's record)

    @classmethod
    def guess_can_open(cls, spec: str | os.PathLike) -> bool:
        if not isinstance(spec, str):
            return False
        if spec.startswith(HUB_PREFIX):
            return True
        if not REPO_ID.match(spec) or ".." in spec or spec.split("/")[0] in NOT_ORGS:
            return False
        path = Path(spec).expanduser()
        return not path.exists() and not near_miss(path)  # a mistyped local path is not looked up on the Hub

    @classmethod
    def open(cls, spec, *, revision=None, token=None, options=None) -> HubSource:
        text = os.fspath(spec)
        return cls(text[len(HUB_PREFIX):] if text.startswith(HUB_PREFIX) else text, revision=revision, token=token)

    def offline(self) -> str | None:
        return "HF_HUB_OFFLINE is set" if _is_offline() else None

    def resolve(self) -> str:
        """The commit of the revision: asked of the Hub (and recorded), or offline the one it last resolved to
        here (a :class:`~lerobot_zarr.errors.HubError` if it never was)."""
        if self.commit is not None:
            return self.commit
        if _is_offline():
            commit = read_ref(self.repo_id, self.revision)
            if commit is None:
                raise HubError(f"{self.repo_id}: HF_HUB_OFFLINE is set and revision {self.revision or '(default)'} "
                               f"was never opened on this machine", repo_id=self.repo_id, revision=self.revision)
        else:
            from ..hub.revisions import resolve_revision

            asked = self.revision
            self.revision, commit = resolve_revision(self.repo_id, self.revision, token=self.token)
            record_ref(self.repo_id, asked, commit)
        self.commit = commit
        return commit

    def files(self):
        commit = self.resolve()
        why = self.offline()
        if why:
            raise NotMaterializedError(f"{self}: {why}: the repo's files are not read (only what local stores hold "
                                       f"is served)", repo_id=self.repo_id)
        from ..hub.files import HubFiles

        return HubFiles(self.repo_id, commit, revision=self.revision, token=self.token)

    def known_record(self) -> dict:
        from ..hub.http import hub_endpoint

        return {"kind": "hub", "repo_id": self.repo_id, "commit": self.resolve(), "endpoint": hub_endpoint()}

    def cache_path(self) -> Path:
        """The store of the resolved commit: known without reading the repo's files (offline too)."""
        return _hub_home(self.repo_id) / self.resolve()

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, token: str | bool | None = None) -> HubSource:
        # the endpoint configured now (HF_ENDPOINT), which may be a mirror of the one the store was made from
        return cls(str(record.get("repo_id")), commit=str(record.get("commit")), token=token)

    @classmethod
    def describe(cls, record: Mapping[str, Any]) -> str:
        endpoint = record.get("endpoint")
        where = "" if not endpoint or "huggingface.co" in str(endpoint) else f" on {endpoint}"
        return f"Hub repo {record.get('repo_id')} @ {str(record.get('commit'))[:12]}{where}"

    @classmethod
    def same(cls, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        """A Hub commit is the same data wherever it is served from (a mirror, another endpoint)."""
        return {k: v for k, v in a.items() if k != "endpoint"} == {k: v for k, v in b.items() if k != "endpoint"}

    @classmethod
    def cached_stores(cls, folder: Path) -> Iterator[Path]:
        for repo in super().cached_stores(folder):
            for entry in super().cached_stores(repo):
                if entry.name != "refs":
                    yield entry

    @classmethod
    def cache_entry(cls, path, record):
        org, _, name = path.parent.name.partition("--")
        commit = path.name.partition("+")[0]  # <commit>+<choices>: a store of other camera choices
        repo = str(record.get("repo_id", f"{org}/{name}")) if record else f"{org}/{name}"
        revision = str(record.get("commit", commit)) if record else commit
        return repo, revision, tuple(_refs(path.parent).get(commit, ()))

    @classmethod
    def prune_reason(cls, path: Path, record: Mapping[str, Any], refs: tuple[str, ...]) -> str | None:
        return None if refs else "no revision name resolves to this commit any more"

    @classmethod
    def removed(cls, path: Path) -> None:
        repo_dir = path.parent
        refs = repo_dir / "refs"
        if refs.is_dir():
            for f in refs.iterdir():
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    if f.is_file() and not f.is_symlink() and f.read_text().strip() == path.name:
                        f.unlink()
            with contextlib.suppress(OSError):
                refs.rmdir()
        with contextlib.suppress(OSError):
            repo_dir.rmdir()

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")


def _hub_home(repo_id: str) -> Path:
    return cache_home() / HubSource.cache_folder / repo_id.replace("/", "--")


def ref_path(repo_id: str, revision: str | None) -> Path:
    """The record of the commit a revision name (None: the default) last resolved to, for ``HF_HUB_OFFLINE``. The
    name is quoted: ``"../x"`` stays one file name inside the cache."""
    return _hub_home(repo_id) / "refs" / quote(revision or "_default", safe="")


def read_ref(repo_id: str, revision: str | None) -> str | None:
    """The commit ``revision`` last resolved to on this machine, or None if it never was."""
    path = ref_path(repo_id, revision)
    return path.read_text().strip() if path.is_file() else None


def record_ref(repo_id: str, revision: str | None, commit: str) -> None:
    """Record (atomically) that ``revision`` resolves to ``commit`` now."""
    path = ref_path(repo_id, revision)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(commit)
    os.replace(tmp, path)


def _refs(repo_dir: Path) -> dict[str, list[str]]:
    """commit -> revision names whose last resolution it was."""
    out: dict[str, list[str]] = {}
    refs = repo_dir / "refs"
    if refs.is_dir():
        for f in sorted(refs.iterdir()):
            if f.is_file() and not f.is_symlink():
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    name = unquote(f.name)
                    out.setdefault(f.read_text().strip(), []).append("default" if name == "_default" else name)
    return out

