"""The test Hub's storage (see :mod:`lerobot_zarr.testing.hub_server` for its layout): content-addressed blobs,
commits as JSON documents, repos with their branches, tags and LFS objects; and the checks of names a request
may carry (repo ids, paths, refs)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["CHUNK", "FROM_PLURAL", "INVALID_CREDENTIALS", "LFS_EXTENSIONS", "LFS_THRESHOLD", "REPO_TYPES",
           "SECURITY_OK", "SHA256_RE", "URL_PREFIX", "ReplyError", "Storage", "TreeIndex", "blob_entry", "check_path",
           "check_ref_name", "check_repo_id", "check_repo_type", "dumps", "header_safe", "is_lfs"]

REPO_TYPES = ("dataset", "model", "space")
_PLURAL = {"dataset": "datasets", "model": "models", "space": "spaces"}
FROM_PLURAL = {v: k for k, v in _PLURAL.items()}
URL_PREFIX = {"dataset": "datasets/", "model": "", "space": "spaces/"}

#: Files strictly bigger than this are stored as LFS files.
LFS_THRESHOLD = 10 * 1024 * 1024
#: Extensions always stored as LFS files (what the Hub's default .gitattributes tracks, roughly).
LFS_EXTENSIONS = frozenset(
    {
        ".parquet", ".arrow", ".mp4", ".avi", ".mkv", ".mov", ".webm", ".png", ".jpg", ".jpeg", ".gif", ".webp",
        ".bin", ".pt", ".pth", ".ckpt", ".safetensors", ".onnx", ".h5", ".hdf5", ".npy", ".npz", ".pkl", ".pickle",
        ".msgpack", ".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".zst", ".7z", ".lz4", ".wav", ".mp3", ".flac",
        ".ogg",
    }
)  # fmt: skip

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_RESERVED_NAMESPACES = frozenset({"api", "datasets", "models", "spaces", "__lfs"})
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
_REF_NAME_RE = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._/-]{0,199}$")
CHUNK = 64 * 1024
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
SECURITY_OK = {"status": "safe", "avScan": {"virusFound": False, "virusNames": None}, "pickleImportScan": None}


# --------------------------------------------------------------------------------------------------- helpers


class ReplyError(Exception):
    """An error answered as JSON ``{"error": message}`` with an optional ``X-Error-Code`` header."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})


def _now_iso() -> str:
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def is_lfs(path: str, size: int, sample: bytes) -> bool:
    if size == 0:
        return False
    if size > LFS_THRESHOLD or os.path.splitext(path)[1].lower() in LFS_EXTENSIONS:
        return True
    return b"\0" in sample[:512]


def check_repo_id(repo_id: str) -> tuple[str, str]:
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise ValueError(f"repo id must be 'namespace/name', got {repo_id!r}")
    ns, name = repo_id.split("/")
    for part in (ns, name):
        if not _NAME_RE.match(part) or ".." in part or part.endswith(".git"):
            raise ValueError(f"invalid repo id {repo_id!r}")
    if ns in _RESERVED_NAMESPACES:
        raise ValueError(f"invalid repo id {repo_id!r}: namespace {ns!r} is reserved")
    return ns, name


def check_repo_type(repo_type: str | None) -> str:
    repo_type = repo_type or "model"
    if repo_type not in REPO_TYPES:
        raise ValueError(f"invalid repo type {repo_type!r}, expected one of {REPO_TYPES}")
    return repo_type


def check_path(path: str, *, allow_root: bool = False) -> str:
    """A path inside a repo: relative, '/'-separated, without '.', '..', '.git' or empty segments."""
    if not isinstance(path, str):
        raise ValueError("path must be a string")
    if path == "" and allow_root:
        return path
    if not path or path.startswith("/") or "\\" in path or "\0" in path:
        raise ValueError(f"invalid path {path!r}")
    if any(part in ("", ".", "..", ".git") for part in path.split("/")):
        raise ValueError(f"invalid path {path!r}")
    return path


def check_ref_name(name: str) -> str:
    if not isinstance(name, str) or not _REF_NAME_RE.match(name) or ".." in name or name.endswith(("/", ".lock")):
        raise ValueError(f"invalid ref name {name!r}")
    if "//" in name or _SHA1_RE.match(name):
        raise ValueError(f"invalid ref name {name!r}")
    return name


def header_safe(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii").replace("\r", " ").replace("\n", " ")[:500]


def dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)

def blob_entry(meta: dict) -> dict:
    return {"blob": meta["sha256"], "size": meta["size"], "sha256": meta["sha256"], "git_sha1": meta["git_sha1"]}


class TreeIndex:
    """Derived views of one commit's tree: files, directories (with git tree oids) and children."""

    def __init__(self, tree: Mapping[str, dict]):
        self.files = dict(tree)
        self.file_oid: dict[str, str] = {}
        self.lfs_info: dict[str, dict] = {}
        children: dict[str, dict[str, str]] = {"": {}}
        for path, entry in self.files.items():
            if entry["lfs"]:
                pointer = _lfs_pointer(entry["sha256"], entry["size"])
                self.file_oid[path] = _git_blob_sha1(pointer)
                self.lfs_info[path] = {"oid": entry["sha256"], "size": entry["size"], "pointerSize": len(pointer)}
            else:
                self.file_oid[path] = entry["git_sha1"]
            parts = path.split("/")
            for i in range(len(parts) - 1):
                parent, d = "/".join(parts[:i]), "/".join(parts[: i + 1])
                children.setdefault(parent, {})[parts[i]] = "dir"
                children.setdefault(d, {})
            children.setdefault("/".join(parts[:-1]), {})[parts[-1]] = "file"
        self.children = children
        self.dirs: dict[str, str] = {}
        self._tree_oid("")

    def _tree_oid(self, d: str) -> str:
        items = []
        for name, kind in self.children.get(d, {}).items():
            full = f"{d}/{name}" if d else name
            if kind == "dir":
                items.append((name + "/", b"40000 " + name.encode() + b"\0" + bytes.fromhex(self._tree_oid(full))))
            else:
                items.append((name, b"100644 " + name.encode() + b"\0" + bytes.fromhex(self.file_oid[full])))
        body = b"".join(raw for _, raw in sorted(items))
        oid = hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()
        self.dirs[d] = oid
        return oid

    def is_dir(self, path: str) -> bool:
        return path in self.dirs


class Storage:
    def __init__(self, root: Path):
        self.root = root
        for sub in ("blobs", "commits", "repos", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self._repos: dict[tuple[str, str], dict] = {}
        self._commits: dict[str, dict] = {}
        self._meta: dict[str, dict] = {}
        self._indexes: OrderedDict[str, TreeIndex] = OrderedDict()

    # blobs -------------------------------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        if not SHA256_RE.match(sha256):
            raise ValueError(f"invalid sha256 {sha256!r}")
        return self.root / "blobs" / sha256[:2] / sha256

    def blob_meta(self, sha256: str) -> dict | None:
        if not SHA256_RE.match(sha256 or ""):
            return None
        meta = self._meta.get(sha256)
        if meta is None:
            path = self.blob_path(sha256)
            meta_path = path.with_name(path.name + ".meta.json")
            if not path.is_file() or not meta_path.is_file():
                return None
            meta = json.loads(meta_path.read_bytes())
            self._meta[sha256] = meta
        return meta

    def _finish_blob(self, tmp: Path, sha256: str, size: int, git_sha1: str) -> dict:
        path = self.blob_path(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size == size:
            tmp.unlink(missing_ok=True)
        else:
            os.replace(tmp, path)
        meta = {"size": size, "git_sha1": git_sha1}
        _write_atomic(path.with_name(path.name + ".meta.json"), dumps(meta))
        self._meta[sha256] = meta
        return {"sha256": sha256, **meta}

    def put_bytes(self, data: bytes) -> dict:
        sha256 = hashlib.sha256(data).hexdigest()
        meta = self.blob_meta(sha256)
        if meta is not None:
            return {"sha256": sha256, **meta}
        tmp = self.root / "tmp" / secrets.token_hex(8)
        tmp.write_bytes(data)
        return self._finish_blob(tmp, sha256, len(data), _git_blob_sha1(data))

    def put_stream(self, chunks: Iterator[bytes], expected_size: int) -> dict:
        """Store a blob from chunks; returns its meta (the caller checks sha256/size against expectations)."""
        tmp = self.root / "tmp" / secrets.token_hex(8)
        h256, h1, size = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % expected_size), 0
        try:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                    h256.update(chunk)
                    h1.update(chunk)
                    size += len(chunk)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if size != expected_size:
            tmp.unlink(missing_ok=True)
            return {"sha256": h256.hexdigest(), "size": size, "git_sha1": None}
        return self._finish_blob(tmp, h256.hexdigest(), size, h1.hexdigest())

    def put_file(self, path: Path) -> dict:
        size = path.stat().st_size

        def chunks():
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    yield chunk

        meta = self.put_stream(chunks(), size)
        if meta["git_sha1"] is None:
            raise ValueError(f"{path} changed while being imported")
        return meta

    # commits -----------------------------------------------------------------------------------------------
    def commit_doc(self, cid: str) -> dict:
        doc = self._commits.get(cid)
        if doc is None:
            doc = json.loads((self.root / "commits" / cid[:2] / f"{cid}.json").read_bytes())
            self._commits[cid] = doc
        return doc

    def index(self, cid: str) -> TreeIndex:
        with self.lock:
            idx = self._indexes.get(cid)
            if idx is not None:
                self._indexes.move_to_end(cid)
                return idx
        idx = TreeIndex(self.commit_doc(cid)["tree"])
        with self.lock:
            self._indexes[cid] = idx
            while len(self._indexes) > 128:
                self._indexes.popitem(last=False)
        return idx

    def _write_commit(self, repo: dict, parent: str | None, tree: dict, message: str, description: str,
                      author: str) -> str:  # fmt: skip
        doc = {
            "repo": f"{repo['type']}:{repo['id']}",
            "parent": parent,
            "message": message,
            "description": description,
            "author": author,
            "date": _now_iso(),
            "nonce": secrets.token_hex(8),
            "tree": tree,
        }
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        cid = hashlib.sha1(data).hexdigest()
        _write_atomic(self.root / "commits" / cid[:2] / f"{cid}.json", data)
        self._commits[cid] = json.loads(data)
        return cid

    # repos -------------------------------------------------------------------------------------------------
    def _repo_file(self, repo_type: str, repo_id: str) -> Path:
        ns, name = check_repo_id(repo_id)
        return self.root / "repos" / repo_type / ns / f"{name}.json"

    def get_repo(self, repo_type: str, repo_id: str) -> dict | None:
        with self.lock:
            key = (repo_type, repo_id)
            repo = self._repos.get(key)
            if repo is None:
                path = self._repo_file(repo_type, repo_id)
                if not path.is_file():
                    return None
                repo = json.loads(path.read_bytes())
                self._repos[key] = repo
            return repo

    def save_repo(self, repo: dict) -> None:
        _write_atomic(self._repo_file(repo["type"], repo["id"]), json.dumps(repo, indent=1).encode())

    def create_repo(self, repo_type: str, repo_id: str, *, private: bool, author: str) -> dict:
        with self.lock:
            if self.get_repo(repo_type, repo_id) is not None:
                raise FileExistsError(repo_id)
            repo = {
                "type": repo_type,
                "id": repo_id,
                "private": bool(private),
                "createdAt": _now_iso(),
                "branches": {},
                "tags": {},
                "commits": [],
                "lfs_objects": {},
            }
            cid = self._write_commit(repo, None, {}, "initial commit", "", author)
            repo["branches"]["main"] = cid
            repo["commits"].append(cid)
            self._repos[(repo_type, repo_id)] = repo
            self.save_repo(repo)
            return repo

    def delete_repo(self, repo_type: str, repo_id: str) -> bool:
        with self.lock:
            path = self._repo_file(repo_type, repo_id)
            self._repos.pop((repo_type, repo_id), None)
            if path.is_file():
                path.unlink()
                return True
            return False

    def resolve(self, repo: dict, rev: str) -> str | None:
        with self.lock:
            if rev.startswith("refs/heads/"):
                return repo["branches"].get(rev[len("refs/heads/") :])
            if rev.startswith("refs/tags/"):
                return repo["tags"].get(rev[len("refs/tags/") :])
            if rev in repo["branches"]:
                return repo["branches"][rev]
            if rev in repo["tags"]:
                return repo["tags"][rev]
            if _SHA1_RE.match(rev) and rev in repo["commits"]:
                return rev
            return None

    def commit(self, repo: dict, branch: str, ops: Sequence[tuple], *, message: str, description: str = "",
               author: str, parent_commit: str | None = None, create_branch: bool = False,
               replace_tree: bool = False) -> str:  # fmt: skip
        """Apply ops ``("add", path, entry)``, ``("delete_file", path)``, ``("delete_folder", path)`` on the head of
        ``branch`` and record a commit, even when nothing changes. Raises ``ReplyError``."""
        with self.lock:
            head = repo["branches"].get(branch)
            if head is None and not create_branch:
                raise ReplyError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
            if parent_commit and (head is None or not head.startswith(parent_commit.lower())):
                raise ReplyError(412, "A commit has happened since. Please refresh and try again.")
            tree = {} if (head is None or replace_tree) else dict(self.commit_doc(head)["tree"])
            for op in ops:
                kind, path = op[0], op[1]
                if kind == "add":
                    tree[path] = op[2]
                elif kind == "delete_file":
                    if path not in tree:
                        raise ReplyError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                    del tree[path]
                elif kind == "delete_folder":
                    prefix = path.rstrip("/") + "/"
                    doomed = [p for p in tree if p.startswith(prefix)]
                    if not doomed:
                        raise ReplyError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
                    for p in doomed:
                        del tree[p]
                else:  # pragma: no cover - internal misuse
                    raise ValueError(kind)
            for path in tree:
                parts = path.split("/")
                for i in range(1, len(parts)):
                    if "/".join(parts[:i]) in tree:
                        raise ReplyError(400, f"Path conflict: {'/'.join(parts[:i])!r} is a file and a folder")
            cid = self._write_commit(repo, head, tree, message, description, author)
            repo["branches"][branch] = cid
            repo["commits"].append(cid)
            for op in ops:
                if op[0] == "add" and op[2]["lfs"]:
                    repo["lfs_objects"][op[2]["sha256"]] = op[2]["size"]
            self.save_repo(repo)
            return cid

    def has_lfs_object(self, repo: dict, oid: str, size: int | None = None) -> bool:
        """Whether ``oid`` was uploaded to (or committed in) this repo: LFS objects are per repo, as on the Hub."""
        with self.lock:
            known = repo["lfs_objects"].get(oid)
        meta = self.blob_meta(oid)
        return known is not None and meta is not None and (size is None or meta["size"] == size)

    def add_lfs_object(self, repo: dict, oid: str, size: int) -> None:
        with self.lock:
            repo["lfs_objects"][oid] = size
            self.save_repo(repo)

    def history(self, cid: str) -> list[str]:
        out = []
        while cid is not None:
            out.append(cid)
            cid = self.commit_doc(cid)["parent"]
        return out

    def last_commit(self, cid: str, path: str, is_dir: bool) -> dict:
        def key(c: str):
            idx = self.index(c)
            if is_dir:
                return idx.dirs.get(path)
            e = idx.files.get(path)
            return None if e is None else (e["sha256"], e["lfs"])

        cur = cid
        while True:
            parent = self.commit_doc(cur)["parent"]
            if parent is None or key(cur) != key(parent):
                doc = self.commit_doc(cur)
                return {"id": cur, "title": doc["message"], "date": doc["date"]}
            cur = parent
