"""A small Hugging Face Hub-compatible HTTP server for tests, built on the standard library only.

The real ``huggingface_hub`` client (``HfApi``, ``hf_hub_download``, ``snapshot_download``, ``HfFileSystem``) can be
pointed at it (``HfApi(endpoint=server.endpoint)``, ``HfFileSystem(endpoint=...)``, or ``HF_ENDPOINT``). Uploads
use the legacy LFS protocol, so the client must run with Xet disabled (``HF_HUB_DISABLE_XET=1`` before import, or
``huggingface_hub.constants.HF_HUB_DISABLE_XET = True``): this server never sends Xet headers.

Usage::

    with HubServer(tmp_path / "hub", tokens={"secret": "alice"}) as hub:
        sha = hub.add_repo("org/name", "path/to/folder", tags=["v3.0"])
        HfApi(endpoint=hub.endpoint).dataset_info("org/name")
        hub.bytes_sent("/datasets/org/name/resolve/")

This module is its face (:class:`HubServer`, ``python -m lerobot_zarr.testing.hub_server``); the parts are
:mod:`.hub_storage` (blobs, commits, repos, name checks), :mod:`.hub_handler` (HTTP plumbing, auth, routing),
:mod:`.hub_routes` (the endpoints) and :mod:`.hub_network` (request records, faults, the network model).

Storage (everything under ``storage_dir``; nothing outside it is ever read or served):

- ``blobs/<sha256[:2]>/<sha256>``: file contents, content addressed, plus ``<sha256>.meta.json`` (size, git sha1).
- ``commits/<id[:2]>/<id>.json``: one JSON document per commit, its id being the sha1 of the document; it holds
  ``parent``, ``message``, ``description``, ``author``, ``date`` and ``tree`` ``{path: {blob, size, sha256,
  git_sha1, lfs}}`` where ``git_sha1`` is the git blob sha1 of the content.
- ``repos/<type>/<namespace>/<name>.json``: ``private``, ``branches``, ``tags``, the repo's commit ids and the LFS
  objects uploaded to it (blobs are shared on disk, but as on the Hub an LFS object counts as already uploaded
  only for the repo it was uploaded or committed to).

Behaviour worth knowing (see also the ``HubServer`` docstring):

- Repo ids are ``namespace/name``. New repos get an empty initial commit on ``main`` (no ``.gitattributes``).
- A file is stored as LFS when it is bigger than 10 MiB, has a binary extension (``LFS_EXTENSIONS``) or its first
  512 bytes contain a NUL byte; empty files are always regular. Tree entries of LFS files carry
  ``lfs: {oid, size, pointerSize}`` and their ``oid`` is the git sha1 of the LFS pointer file, like on the Hub.
- ``ETag`` is the quoted sha256 for LFS files (also sent as ``X-Linked-Etag``, with ``X-Linked-Size``) and the git
  blob sha1 for regular files.
- Authentication: with ``tokens=None`` it is off (every request is authorized, ``private`` is only reported). With
  ``tokens`` set, a request carrying an unknown token gets 401 with ``X-Error-Message: Invalid credentials in
  Authorization header`` (the client raises a plain ``HfHubHTTPError`` with status 401); reading a private repo
  without a token gets 401 with ``X-Error-Code: RepoNotFound`` (the client raises ``RepositoryNotFoundError`` whose
  ``response.status_code`` is 401, the way to tell an auth failure from a missing repo, which is 404); writes
  without a token get 401. Any valid token may read and write every repo. ``/api/whoami-v2`` answers 401 unless
  the request carries a valid token (so also whenever ``tokens`` is None). Tokens listed in ``read_only`` may read
  but not write (403 on writes; ``whoami`` gives their role as ``"read"``).

Endpoints (``{t}`` = ``datasets|models|spaces``; ``{prefix}`` = ``datasets/``, ``spaces/`` or nothing for models;
``{rev}`` = branch, tag, ``refs/heads/x``, ``refs/tags/x`` or a full commit sha, URL-quoted):

- ``GET /api/{t}/{id}``, ``GET /api/{t}/{id}/revision/{rev}``: repo info with ``sha`` and ``siblings``.
- ``GET /api/{t}/{id}/tree/{rev}[/{path}]?recursive=&expand=``: entries, paginated (``tree_page_size``) with
  ``Link: <...>; rel="next"``; 404 ``EntryNotFound`` if ``path`` is not a folder. ``expand`` adds ``lastCommit``.
- ``POST /api/{t}/{id}/paths-info/{rev}`` (form or JSON ``paths``, ``expand``): entries of the paths that exist.
- ``GET /api/{t}/{id}/refs``, ``GET /api/{t}/{id}/commits/{rev}``, ``GET /api/{t}/{id}/auth-check[/write]`` (200
  if the request may read / write the repo, else 401 / 403 / 404 ``RepoNotFound``).
- ``HEAD|GET /{prefix}{id}/resolve/{rev}/{path}``: single ``Range`` (``s-e``, ``s-``, ``-n``) -> 206, 416 if
  unsatisfiable; a malformed or multi-range header is ignored (200).
- ``POST /api/repos/create``, ``DELETE /api/repos/delete``, ``PUT /api/{t}/{id}/settings`` (visibility).
- ``POST /api/{t}/{id}/preupload/{rev}``, ``POST /{prefix}{id}.git/info/lfs/objects/batch`` (upload only; the
  ``href`` is a signed URL on this server, PUT to it without Authorization, content checked against the oid),
  ``POST /api/{t}/{id}/commit/{branch}`` (ndjson; ``parentCommit`` checked -> 412; ``create_pr`` -> 400; a
  commit changing nothing is still recorded), ``POST|DELETE /api/{t}/{id}/tag/{rev}``,
  ``POST|DELETE /api/{t}/{id}/branch/{name}``, ``POST /api/validate-yaml``, ``GET /api/whoami-v2``.
- Errors are JSON ``{"error": ...}`` with ``X-Error-Message`` and, for 404s of repos, revisions and entries,
  ``X-Error-Code`` ``RepoNotFound`` / ``RevisionNotFound`` / ``EntryNotFound`` (entry errors also carry
  ``X-Repo-Commit``). Bad repo ids or paths (``..``, absolute, ``.git``, empty segments) get 400.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from .hub_handler import Handler, HubHTTPServer
from .hub_network import FAULT_KINDS, Fault, Faults, HubStats, Link, NetworkModel, RequestRecord
from .hub_storage import (
    LFS_EXTENSIONS,
    LFS_THRESHOLD,
    REPO_TYPES,
    ReplyError,
    Storage,
    blob_entry,
    check_path,
    check_ref_name,
    check_repo_id,
    check_repo_type,
    is_lfs,
)

__all__ = ["HubServer", "HubStats", "NetworkModel", "RequestRecord", "LFS_EXTENSIONS", "LFS_THRESHOLD",
           "REPO_TYPES"]


class HubServer:
    """A Hub-compatible HTTP server on ``host:port`` (port 0 picks a free one) storing repos under ``storage_dir``.

    ``tokens`` maps token -> user name; requests authenticate with ``Authorization: Bearer <token>``.
    ``endpoint`` is ``http://host:port`` once started. ``tree_page_size`` (default 1000; 50 when ``expand``) is
    the page size of the tree listing, which paginates with a ``Link: <...>; rel="next"`` header.
    ``stats`` records every request (:class:`HubStats`). State persists in ``storage_dir``: a new server on the
    same directory serves the same repos. ``network`` (a :class:`NetworkModel`, settable at any time; None: as
    fast as the machine) models latency and bandwidth.
    """

    def __init__(self, storage_dir: str | os.PathLike, *, host: str = "127.0.0.1", port: int = 0,
                 tokens: Mapping[str, str] | None = None, read_only: Sequence[str] = (),
                 network: NetworkModel | None = None):  # fmt: skip
        self.storage_dir = Path(storage_dir).resolve()
        self.host, self.port = host, port
        self.tokens: dict[str, str] | None = dict(tokens) if tokens is not None else None
        self.read_only = frozenset(read_only)
        self.stopping = threading.Event()
        self.unstall = threading.Event()  # set: stalled answers end now (release_stalls, stop)
        self.tree_page_size = 1000
        self.network = network
        self.link = Link()
        self.stats = HubStats()
        #: Tracebacks of unexpected exceptions in request handlers (each also answered with a 500).
        self.errors: list[str] = []
        self.storage = Storage(self.storage_dir)
        self._secret = secrets.token_bytes(32)
        self._faults = Faults()
        self._httpd: HubHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._endpoint: str | None = None

    # lifecycle ---------------------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        if self._endpoint is None:
            raise RuntimeError("HubServer is not started")
        return self._endpoint

    def start(self) -> HubServer:
        if self._httpd is not None:
            return self
        self.stopping.clear()
        self._httpd = HubHTTPServer((self.host, self.port), Handler, self)
        host, port = self._httpd.server_address[:2]
        self.port = port
        self._endpoint = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name=f"hub-server-{port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self.stopping.set()  # stalled and trickling answers end
        self.unstall.set()
        httpd.shutdown()
        httpd.server_close()
        httpd.close_all_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # repos -------------------------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, folder: str | os.PathLike | None = None, *, repo_type: str = "dataset",
                 private: bool = False, tags: Sequence[str] = (), branch: str = "main",
                 commit_message: str = "initial commit") -> str:  # fmt: skip
        """Create the repo if needed, then commit exactly the files of ``folder`` (recursively, skipping ``.git``
        and ``.cache/huggingface``; none when ``folder`` is None) to ``branch`` as one commit whose tree replaces
        the branch's. Sets ``private``, points each of ``tags`` at the commit and returns its sha."""
        repo_type = check_repo_type(repo_type)
        check_repo_id(repo_id)
        check_ref_name(branch)
        for tag in tags:
            check_ref_name(tag)
        storage = self.storage
        ops = []
        if folder is not None:
            root = Path(folder)
            if not root.is_dir():
                raise ValueError(f"{folder} is not a directory")
            for dirpath, dirnames, filenames in os.walk(root):
                rel_dir = Path(dirpath).relative_to(root).as_posix()
                dirnames[:] = sorted(
                    d for d in dirnames if d != ".git" and not (rel_dir == ".cache" and d == "huggingface")
                )
                for name in sorted(filenames):
                    rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                    check_path(rel)
                    full = Path(dirpath) / name
                    with open(full, "rb") as f:
                        sample = f.read(512)
                    meta = storage.put_file(full)
                    ops.append(("add", rel, {**blob_entry(meta), "lfs": is_lfs(rel, meta["size"], sample)}))
        with storage.lock:
            repo = storage.get_repo(repo_type, repo_id)
            if repo is None:
                repo = storage.create_repo(repo_type, repo_id, private=private, author="hub-server")
            repo["private"] = bool(private)
            cid = storage.commit(
                repo, branch, ops, message=commit_message, author="hub-server", create_branch=True, replace_tree=True
            )
            for tag in tags:
                repo["tags"][tag] = cid
            storage.save_repo(repo)
        return cid

    def commit_files(self, repo_id: str, files: Mapping[str, bytes], *, repo_type: str = "dataset",
                     branch: str = "main", deletions: Sequence[str] = (), message: str = "") -> str:  # fmt: skip
        """Commit ``files`` (path -> bytes, added or replaced) and ``deletions`` (file paths, or folders, given
        with or without a trailing '/') on top of ``branch``; always records a commit, even an empty one."""
        repo_type = check_repo_type(repo_type)
        storage = self.storage
        repo = storage.get_repo(repo_type, repo_id)
        if repo is None:
            raise ValueError(f"no {repo_type} repo {repo_id!r}")
        ops = []
        with storage.lock:
            head = repo["branches"].get(branch)
            if head is None:
                raise ValueError(f"no branch {branch!r} in {repo_id!r}")
            current = storage.index(head)
        for path in deletions:
            clean = check_path(path.rstrip("/"))
            if path.endswith("/") or (clean not in current.files and current.is_dir(clean)):
                ops.append(("delete_folder", clean))
            else:
                ops.append(("delete_file", clean))
        for path, data in files.items():
            check_path(path)
            meta = storage.put_bytes(bytes(data))
            ops.append(("add", path, {**blob_entry(meta), "lfs": is_lfs(path, meta["size"], bytes(data[:512]))}))
        try:
            return storage.commit(repo, branch, ops, message=message or "commit files", author="hub-server")
        except ReplyError as e:
            raise ValueError(e.message) from None

    def refs(self, repo_id: str, *, repo_type: str = "dataset") -> dict[str, dict[str, str]]:
        """``{"branches": {name: sha}, "tags": {name: sha}}``."""
        repo = self._get_repo(repo_id, repo_type)
        with self.storage.lock:
            return {"branches": dict(repo["branches"]), "tags": dict(repo["tags"])}

    def commits(self, repo_id: str, *, repo_type: str = "dataset", revision: str = "main") -> list[dict]:
        """History of ``revision``, newest first: the commit documents with their ``id``."""
        storage = self.storage
        cid = self._resolve_rev(repo_id, repo_type, revision)
        return [{"id": c, **storage.commit_doc(c)} for c in storage.history(cid)]

    def list_files(self, repo_id: str, *, repo_type: str = "dataset", revision: str = "main") -> list[str]:
        return sorted(self.storage.index(self._resolve_rev(repo_id, repo_type, revision)).files)

    def get_file(self, repo_id: str, path: str, *, repo_type: str = "dataset", revision: str = "main") -> bytes:
        idx = self.storage.index(self._resolve_rev(repo_id, repo_type, revision))
        if path not in idx.files:
            raise FileNotFoundError(path)
        return self.storage.blob_path(idx.files[path]["sha256"]).read_bytes()

    def _get_repo(self, repo_id: str, repo_type: str) -> dict:
        repo = self.storage.get_repo(check_repo_type(repo_type), repo_id)
        if repo is None:
            raise ValueError(f"no {repo_type} repo {repo_id!r}")
        return repo

    def _resolve_rev(self, repo_id: str, repo_type: str, revision: str) -> str:
        cid = self.storage.resolve(self._get_repo(repo_id, repo_type), revision)
        if cid is None:
            raise ValueError(f"no revision {revision!r} in {repo_id!r}")
        return cid

    # stats & faults ----------------------------------------------------------------------------------------
    def bytes_sent(self, path_prefix: str | None = None) -> int:
        """Response body bytes sent for requests whose URL-decoded path starts with ``path_prefix``."""
        return self.stats.bytes_sent(path_prefix)

    def requests(self, method: str | None = None, path_contains: str | None = None) -> list[RequestRecord]:
        return self.stats.requests(method, path_contains)

    def reset_stats(self) -> None:
        self.stats.reset()

    def inject_fault(self, *, path_contains: str, kind: str, count: int = 1, after_bytes: int = 0,
                     method: str | None = None, seconds: float = 60.0, rate: int = 16,
                     value: str = "") -> None:  # fmt: skip
        """Make the next ``count`` requests whose URL-decoded path contains ``path_contains`` (and whose method is
        ``method``, if given) fail. Kinds:

        - ``"500"``: answer ``500`` with a JSON error body (the client retries some calls on 5xx).
        - ``"drop"``: send the status line and headers (with the full ``Content-Length``), then close the
          connection after ``after_bytes`` body bytes; a response without body (HEAD) is dropped before its
          status line.
        - ``"reset"``: close the connection without answering.
        - ``"401"``, ``"403"``: answer that status (as for a token that may not read the file).
        - ``"stall"``: send nothing for ``seconds`` (or until :meth:`release_stalls` or the server stops), then close
          the connection; with ``after_bytes`` > 0, the status line, headers and that many body bytes first.
        - ``"trickle"``: send the body at ``rate`` bytes per second (in tenths of a second).
        - ``"short"`` (file downloads): a complete answer (``Content-Length`` agreeing) of at most ``after_bytes``
          body bytes, whatever range was asked.
        - ``"bad_range"`` (range downloads): the bytes ``max(1, after_bytes)`` further into the file (or back,
          at its end), with a ``Content-Range`` saying so.
        - ``"bad_commit"`` (``/refs`` and repo info): ``value`` wherever a commit id is due.
        - ``"gzip_bomb"``: the answer is a gzip stream (``Content-Encoding: gzip``) inflating to ``after_bytes``
          bytes of spaces (default 1 GiB) from about a thousandth of that.
        - ``"deep_json"`` (JSON answers): the answer is a JSON array nested ``after_bytes`` levels deep (default
          100,000).
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        if count < 1 or after_bytes < 0 or seconds < 0 or rate < 1:
            raise ValueError("count and rate must be >= 1, after_bytes and seconds >= 0")
        if kind == "stall":
            self.unstall.clear()
        self._faults.add(Fault(path_contains, kind, count, after_bytes, method.upper() if method else None, seconds,
                               rate, value))

    def release_stalls(self) -> None:
        """End every ``"stall"`` now (their connections are closed), and make the stalls still to come end at once:
        a test waits on an event, not on a stall's seconds."""
        self.unstall.set()

    def clear_faults(self) -> None:
        self._faults.clear()

    def take_fault(self, method: str, path: str) -> Fault | None:
        """The injected fault a request of ``method`` to ``path`` meets, if any (counted down, dropped at 0)."""
        return self._faults.take(method, path)

    def sign(self, key: str, size: int) -> str:
        """The signature of an LFS upload URL (``key``, ``size``): only URLs this server handed out are accepted."""
        return hmac.new(self._secret, f"{key}:{size}".encode(), hashlib.sha256).hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lerobot_zarr.testing.hub_server``: serve LeRobot folders (or a generated sample) as Hub dataset
    repos on 127.0.0.1 until Ctrl-C, to try the Hub commands (``lerobot-zarr info org/name``, ``convert``,
    ``push``...) without the network."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m lerobot_zarr.testing.hub_server", description=main.__doc__)
    parser.add_argument("--repo", action="append", default=[], metavar="ORG/NAME=FOLDER",
                        help="serve a LeRobot dataset folder as this repo, tagged with its codebase version "
                             "(v3.0, v2.1: what LeRobot's revision resolution picks); repeatable")
    parser.add_argument("--sample", default=None, metavar="ORG/NAME",
                        help="serve a generated LeRobot v3.0 dataset (50 episodes, a PNG camera) as this repo")
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument("--token", default="hf_local_token",
                        help="the token that may write (push); reading needs none (default hf_local_token)")
    parser.add_argument("--storage", type=Path, default=None,
                        help="keep the served repos in this folder (default: a temporary one, deleted at the end)")
    args = parser.parse_args(argv)
    if not args.repo and not args.sample:
        parser.error("give --repo ORG/NAME=FOLDER or --sample ORG/NAME")
    with tempfile.TemporaryDirectory(prefix="lerobot_zarr-hub-") as tmp:
        storage = args.storage if args.storage is not None else Path(tmp) / "storage"
        with HubServer(storage, port=args.port, tokens={args.token: "local"}) as hub:
            repos = [spec.split("=", 1) for spec in args.repo]
            if args.sample:
                from .sample_data import write_sample_dataset

                repos.append((args.sample, str(write_sample_dataset(Path(tmp) / "sample", n_episodes=50,
                                                                     image_keys=("observation.images.cam",)))))
            for pair in repos:
                if len(pair) != 2 or not Path(pair[1], "meta", "info.json").is_file():
                    parser.error(f"--repo {'='.join(pair)}: expected ORG/NAME=FOLDER of a LeRobot dataset")
                repo_id, folder = pair
                version = json.loads(Path(folder, "meta", "info.json").read_text()).get("codebase_version")
                hub.add_repo(repo_id, folder, tags=[version] if isinstance(version, str) else [])
                print(f"serving {repo_id} ({folder}, tag {version})")
            print(f"Hub at {hub.endpoint} until Ctrl-C. In another shell:\n"
                  f"  export HF_ENDPOINT={hub.endpoint} HF_HUB_DISABLE_XET=1 HF_TOKEN={args.token}\n"
                  f"  lerobot-zarr info {repos[0][0]}", flush=True)
            signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops it as Ctrl-C does: its folders removed
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                print("stopped")
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
