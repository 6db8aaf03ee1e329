"""The test Hub's API endpoints (what each answers is listed in :mod:`lerobot_zarr.testing.hub_server`): account
and repos, reading (info, tree, paths-info, refs, commits, resolve with Range) and writing (preupload, LFS,
commit, tags, branches, settings)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import threading
from typing import Protocol
from urllib.parse import parse_qs, urlencode

from .hub_network import Fault, HubStats, Link, NetworkModel
from .hub_storage import (
    CHUNK,
    FROM_PLURAL,
    INVALID_CREDENTIALS,
    SECURITY_OK,
    SHA256_RE,
    URL_PREFIX,
    ReplyError,
    Storage,
    TreeIndex,
    blob_entry,
    check_path,
    check_ref_name,
    check_repo_id,
    check_repo_type,
    dumps,
    is_lfs,
)

__all__ = ["Routes", "ServedHub"]


class ServedHub(Protocol):
    """What the request handler and its routes use of the :class:`~lerobot_zarr.testing.hub_server.HubServer`
    they serve."""

    tokens: dict[str, str] | None
    read_only: frozenset[str]
    tree_page_size: int
    network: NetworkModel | None
    stats: HubStats
    errors: list[str]
    storage: Storage
    link: Link
    stopping: threading.Event
    unstall: threading.Event

    @property
    def endpoint(self) -> str: ...

    def take_fault(self, method: str, path: str) -> Fault | None: ...

    def sign(self, key: str, size: int) -> str: ...


class Routes:
    """The Hub API endpoints, one method each (a mixin of :class:`~lerobot_zarr.testing.hub_handler.Handler`,
    whose plumbing they use: ``_send_json``, ``_repo``, ``_json_body``...)."""

    hub: ServedHub

    # account & repos ---------------------------------------------------------------------------------------
    def _whoami(self) -> None:
        if self._user is None:
            raise ReplyError(401, INVALID_CREDENTIALS if self.hub.tokens is None else "Unauthorized")
        self._send_json(
            {
                "type": "user",
                "id": hashlib.sha1(self._user.encode()).hexdigest()[:24],
                "name": self._user,
                "fullname": self._user,
                "email": None,
                "emailVerified": False,
                "isPro": False,
                "canPay": False,
                "avatarUrl": "",
                "orgs": [],
                "auth": {"type": "access_token",
                         "accessToken": {"displayName": "test", "role": "read" if self._read_only else "write"}},
            }
        )

    def _create_repo(self) -> None:
        self._require_auth()
        body = self._json_body()
        name, org = body.get("name"), body.get("organization") or self._user
        if not isinstance(name, str) or not org:
            raise ReplyError(400, "'name' (and 'organization' when anonymous) are required")
        repo_id = f"{org}/{name}"
        try:
            check_repo_id(repo_id)
            repo_type = check_repo_type(body.get("type"))
        except ValueError as e:
            raise ReplyError(400, str(e)) from None
        visibility = body.get("visibility")
        private = bool(body.get("private")) if visibility is None else visibility == "private"
        url = self._repo_url(repo_type, repo_id)
        try:
            self.hub.storage.create_repo(repo_type, repo_id, private=private, author=self._user or "anonymous")
        except FileExistsError:
            self._send_json({"error": f"You already created this {repo_type} repo", "url": url}, 409)
            return
        self._send_json({"url": url, "name": repo_id, "id": repo_id})

    def _delete_repo(self) -> None:
        self._require_auth()
        body = self._json_body()
        name, org = body.get("name"), body.get("organization") or self._user
        try:
            repo_type = check_repo_type(body.get("type"))
            repo_id = f"{org}/{name}"
            check_repo_id(repo_id)
        except ValueError as e:
            raise ReplyError(400, str(e)) from None
        if not self.hub.storage.delete_repo(repo_type, repo_id):
            raise ReplyError(404, "Repository not found", "RepoNotFound")
        self._send_json({})

    # reading -----------------------------------------------------------------------------------------------
    def _info(self, repo_type: str, repo_id: str, rev: str | None) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id)
        cid = self._resolve(repo, rev if rev else "main")
        idx = storage.index(cid)
        doc = storage.commit_doc(cid)
        siblings = []
        for path in sorted(idx.files):
            entry = idx.files[path]
            sib = {"rfilename": path, "size": entry["size"], "blobId": idx.file_oid[path]}
            if path in idx.lfs_info:
                lfs = idx.lfs_info[path]
                sib["lfs"] = {"sha256": lfs["oid"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]}
            siblings.append(sib)
        self._send_json(
            {
                "_id": hashlib.sha1(f"{repo_type}:{repo_id}".encode()).hexdigest()[:24],
                "id": repo_id,
                "author": repo_id.split("/")[0],
                "sha": self._bad_commit(cid),
                "lastModified": doc["date"],
                "createdAt": repo["createdAt"],
                "private": repo["private"],
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": siblings,
                "usedStorage": sum(e["size"] for e in idx.files.values()),
            }
        )

    def _entry_json(self, idx: TreeIndex, cid: str, path: str, expand: bool) -> dict:
        storage = self.hub.storage
        if idx.is_dir(path):
            out = {"type": "directory", "oid": idx.dirs[path], "size": 0, "path": path}
            if expand:
                out["lastCommit"] = storage.last_commit(cid, path, True)
            return out
        entry = idx.files[path]
        out = {"type": "file", "oid": idx.file_oid[path], "size": entry["size"], "path": path}
        if path in idx.lfs_info:
            out["lfs"] = dict(idx.lfs_info[path])
        if expand:
            out["lastCommit"] = storage.last_commit(cid, path, False)
            out["securityFileStatus"] = dict(SECURITY_OK)
        return out

    def _tree(self, repo_type: str, repo_id: str, args: list[str]) -> None:
        if not args:
            raise ReplyError(404, "Not Found")
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id)
        base = self._path("/".join(args[1:]).strip("/"), allow_root=True)
        recursive, expand = self._flag("recursive"), self._flag("expand")
        cursor = self._query.get("cursor", [None])[-1]
        offset = 0
        if cursor:
            try:
                state = json.loads(base64.urlsafe_b64decode(cursor.encode()))
                cid, offset = str(state["c"]), int(state["o"])
            except (ValueError, KeyError, TypeError, binascii.Error):
                raise ReplyError(400, "Invalid cursor") from None
            if cid not in repo["commits"] or offset < 0:
                raise ReplyError(400, "Invalid cursor")
        else:
            cid = self._resolve(repo, args[0])
        idx = storage.index(cid)
        if base and not idx.is_dir(base):
            raise ReplyError(404, f"Entry not found: {base}", "EntryNotFound", {"X-Repo-Commit": cid})
        if recursive:
            prefix = base + "/" if base else ""
            paths = sorted(p for p in [*idx.dirs, *idx.files] if p and p.startswith(prefix))
        else:
            kids = idx.children.get(base, {})
            join = (lambda n: f"{base}/{n}") if base else (lambda n: n)
            paths = [join(n) for n in sorted(kids) if kids[n] == "dir"]
            paths += [join(n) for n in sorted(kids) if kids[n] == "file"]
        page_size = max(1, self.hub.tree_page_size if not expand else min(50, self.hub.tree_page_size))
        page = paths[offset : offset + page_size]
        headers = {"X-Repo-Commit": cid}
        if offset + page_size < len(paths):
            params = [(k, v) for k, vs in self._query.items() if k != "cursor" for v in vs]
            token = base64.urlsafe_b64encode(dumps({"c": cid, "o": offset + page_size})).decode()
            params.append(("cursor", token))
            headers["Link"] = f'<{self.hub.endpoint}{self._raw_path}?{urlencode(params)}>; rel="next"'
        self._send_json([self._entry_json(idx, cid, p, expand) for p in page], headers=headers)

    def _paths_info(self, repo_type: str, repo_id: str, rev: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id)
        cid = self._resolve(repo, rev or "main")
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            body = self._json_body()
            paths, expand = body.get("paths") or [], bool(body.get("expand"))
        else:
            form = parse_qs(self._body.decode("utf-8", "replace"), keep_blank_values=True)
            paths = form.get("paths", [])
            expand = (form.get("expand") or ["false"])[-1].lower() in ("1", "true")
        if isinstance(paths, str):
            paths = [paths]
        idx = storage.index(cid)
        out = []
        for raw in paths:
            path = str(raw).strip("/")
            try:
                check_path(path)
            except ValueError:
                continue
            if path in idx.files or idx.is_dir(path):
                out.append(self._entry_json(idx, cid, path, expand))
        self._send_json(out, headers={"X-Repo-Commit": cid})

    def _auth_check(self, repo_type: str, repo_id: str, args: list[str]) -> None:
        if args not in ([], ["write"]):
            raise ReplyError(404, "Not Found")
        self._repo(repo_type, repo_id, write=args == ["write"])
        self._send_json({})

    def _bad_commit(self, cid: str) -> str:
        """A ``"bad_commit"`` fault answers its ``value`` wherever a commit id is due."""
        return self._fault.value if self._fault is not None and self._fault.kind == "bad_commit" else cid

    def _refs(self, repo_type: str, repo_id: str) -> None:
        repo = self._repo(repo_type, repo_id)
        with self.hub.storage.lock:
            branches, tags = sorted(repo["branches"].items()), sorted(repo["tags"].items())
        out = {
            "branches": [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": self._bad_commit(c)}
                         for n, c in branches],
            "tags": [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": self._bad_commit(c)} for n, c in tags],
            "converts": [],
        }
        if self._flag("include_prs"):
            out["pullRequests"] = []
        self._send_json(out)

    def _commits(self, repo_type: str, repo_id: str, rev: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id)
        out = []
        for cid in storage.history(self._resolve(repo, rev)):
            doc = storage.commit_doc(cid)
            out.append(
                {
                    "id": cid,
                    "title": doc["message"],
                    "message": doc["description"],
                    "authors": [{"user": doc["author"], "avatar": None}],
                    "date": doc["date"],
                }
            )
        self._send_json(out)

    def _resolve_file(self, repo_type: str, repo_id: str, rev: str, path: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id)
        cid = self._resolve(repo, rev)
        path = self._path(path)
        idx = storage.index(cid)
        entry = idx.files.get(path)
        if entry is None:
            raise ReplyError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": cid})
        size, lfs = entry["size"], entry["lfs"]
        etag = entry["sha256"] if lfs else entry["git_sha1"]
        headers = {
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
            "ETag": f'"{etag}"',
            "X-Repo-Commit": cid,
        }
        if lfs:
            headers["X-Linked-Etag"] = f'"{etag}"'
            headers["X-Linked-Size"] = str(size)
        start, end, status = 0, size - 1, 200
        range_header = self.headers.get("Range")
        if range_header and self.command == "GET":
            parsed = _parse_range(range_header, size)
            if parsed == "unsatisfiable":
                raise ReplyError(416, "Requested Range Not Satisfiable", headers={"Content-Range": f"bytes */{size}"})
            if parsed is not None:
                start, end = parsed
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = max(0, end - start + 1)
        fault = self._fault
        if fault is not None and fault.kind == "short":  # a complete answer, just fewer bytes than the range
            length = min(length, fault.after_bytes)
        if fault is not None and fault.kind == "bad_range" and status == 206:  # another part of the file than asked
            shift = max(1, fault.after_bytes)
            start = start + shift if start + shift + length <= size else max(0, start - shift)
            headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{size}"
        if self._start(status, headers, length):
            with open(storage.blob_path(entry["sha256"]), "rb") as f:
                f.seek(start)
                remaining = length
                while remaining:
                    chunk = f.read(min(CHUNK, remaining))
                    if not chunk:
                        raise ConnectionError("blob shorter than recorded")
                    self._write(chunk)
                    remaining -= len(chunk)
        self._finish_body()

    # writing -----------------------------------------------------------------------------------------------
    def _preupload(self, repo_type: str, repo_id: str, rev: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id, write=True)
        cid = self._resolve(repo, rev or "main")
        files = self._json_body().get("files")
        if not isinstance(files, list):
            raise ReplyError(400, "'files' must be a list")
        idx = storage.index(cid)
        out = []
        for item in files:
            if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                raise ReplyError(400, "each file needs a 'path'")
            path = self._path(item["path"])
            try:
                sample = base64.b64decode(item.get("sample") or "")
                size = int(item.get("size") or 0)
            except (ValueError, TypeError, binascii.Error):
                raise ReplyError(400, f"invalid sample or size for {path}") from None
            mode = "lfs" if is_lfs(path, size, sample) else "regular"
            info = {"path": path, "uploadMode": mode, "shouldIgnore": False}
            existing = idx.files.get(path)
            if existing is not None:
                info["oid"] = existing["sha256"] if mode == "lfs" else existing["git_sha1"]
            out.append(info)
        self._send_json({"files": out, "commitOid": cid})

    def _lfs_batch(self, repo_type: str, repo_id: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id, write=True)
        body = self._json_body()
        if body.get("operation") != "upload":
            raise ReplyError(400, "Only the 'upload' operation is supported by this test hub")
        objects = body.get("objects")
        if not isinstance(objects, list):
            raise ReplyError(400, "'objects' must be a list")
        out = []
        for obj in objects:
            oid, size = (obj or {}).get("oid"), (obj or {}).get("size")
            if not isinstance(oid, str) or not SHA256_RE.match(oid) or not isinstance(size, int) or size < 0:
                out.append(
                    {"oid": str(oid), "size": size if isinstance(size, int) else 0,
                     "error": {"code": 422, "message": "invalid oid or size"}}
                )  # fmt: skip
                continue
            item = {"oid": oid, "size": size, "authenticated": True}
            if not storage.has_lfs_object(repo, oid, size):
                key = f"{URL_PREFIX[repo_type]}{repo_id}/{oid}"
                href = f"{self.hub.endpoint}/__lfs/{key}?size={size}&sig={self.hub.sign(key, size)}"
                item["actions"] = {"upload": {"href": href, "expires_in": 3600}}
            out.append(item)
        self._send_json(
            {"transfer": "basic", "objects": out, "hash_algo": "sha256"},
            content_type="application/vnd.git-lfs+json",
        )

    def _lfs_put(self, method: str, seg: list[str]) -> None:
        """PUT of an LFS object to the signed URL handed out by the batch endpoint (no Authorization header)."""
        if method != "PUT":
            raise ReplyError(405, "Method not allowed")
        size_s, sig = self._query.get("size", [""])[-1], self._query.get("sig", [""])[-1]
        key = "/".join(seg)
        if not size_s.isdigit() or not hmac.compare_digest(sig, self.hub.sign(key, int(size_s))):
            raise ReplyError(403, "Invalid or expired upload URL")
        if seg and seg[0] in ("datasets", "spaces"):
            repo_type, seg = FROM_PLURAL[seg[0]], seg[1:]
        else:
            repo_type = "model"
        oid, size = seg[-1], int(size_s)
        storage = self.hub.storage
        repo = storage.get_repo(repo_type, "/".join(seg[:-1]))
        if repo is None:
            raise ReplyError(404, "Repository not found", "RepoNotFound")
        chunks = self._read_chunks() if not self._body_consumed else iter([self._body])
        meta = storage.put_stream(chunks, size)
        if meta["sha256"] != oid or meta["size"] != size:
            raise ReplyError(400, f"Uploaded content does not match oid {oid} / size {size}")
        storage.add_lfs_object(repo, oid, size)
        self._send_bytes(200, b"", content_type="text/plain")

    def _commit(self, repo_type: str, repo_id: str, rev: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id, write=True)
        if self._flag("create_pr"):
            raise ReplyError(400, "Pull requests are not supported by this test hub")
        branch = rev[len("refs/heads/") :] if rev.startswith("refs/heads/") else rev
        if branch not in repo["branches"]:
            if storage.resolve(repo, rev) is not None:
                raise ReplyError(400, f"Can only commit to a branch, not to {rev!r}")
            raise ReplyError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        header, ops = None, []
        for n, line in enumerate(self._body.splitlines()):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                key, value = item["key"], item["value"]
            except (ValueError, KeyError, TypeError):
                raise ReplyError(400, f"Invalid ndjson line {n + 1}") from None
            if key == "header":
                header = value
            elif key == "file":
                path = self._path(str(value.get("path", "")))
                content = str(value.get("content", ""))
                try:
                    if value.get("encoding") == "base64":
                        data = base64.b64decode(content, validate=True)
                    else:
                        data = content.encode()
                except (ValueError, binascii.Error):
                    raise ReplyError(400, f"Invalid base64 content for {path}") from None
                ops.append(("add", path, {**blob_entry(storage.put_bytes(data)), "lfs": False}))
            elif key == "lfsFile":
                path = self._path(str(value.get("path", "")))
                oid = str(value.get("oid", ""))
                if not storage.has_lfs_object(repo, oid, value.get("size")):
                    raise ReplyError(422, f"LFS object {oid} for {path} was not uploaded (or has another size)")
                meta = storage.blob_meta(oid)
                ops.append(("add", path, {**blob_entry({"sha256": oid, **meta}), "lfs": True}))
            elif key == "deletedFile":
                ops.append(("delete_file", self._path(str(value.get("path", "")))))
            elif key == "deletedFolder":
                ops.append(("delete_folder", self._path(str(value.get("path", "")).rstrip("/"))))
            else:
                raise ReplyError(400, f"Unknown operation key {key!r}")
        if not isinstance(header, dict):
            raise ReplyError(400, "Missing commit header")
        cid = storage.commit(
            repo,
            branch,
            ops,
            message=str(header.get("summary") or "commit"),
            description=str(header.get("description") or ""),
            author=self._user or "anonymous",
            parent_commit=header.get("parentCommit"),
        )
        self._send_json(
            {
                "success": True,
                "commitOid": cid,
                "commitUrl": f"{self._repo_url(repo_type, repo_id)}/commit/{cid}",
                "pullRequestUrl": None,
            }
        )

    def _settings(self, repo_type: str, repo_id: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id, write=True)
        if not self._body_consumed:
            self._body = self._read_body()
        body = self._json_body()
        with storage.lock:
            if "visibility" in body:
                repo["private"] = body["visibility"] == "private"
            elif "private" in body:
                repo["private"] = bool(body["private"])
            storage.save_repo(repo)
        self._send_json({})

    def _create_tag(self, repo_type: str, repo_id: str, rev: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id, write=True)
        cid = self._resolve(repo, rev)
        tag = self._json_body().get("tag")
        try:
            check_ref_name(tag)
        except ValueError as e:
            raise ReplyError(400, str(e)) from None
        with storage.lock:
            if tag in repo["tags"]:
                raise ReplyError(409, f"Tag {tag!r} already exists")
            repo["tags"][tag] = cid
            storage.save_repo(repo)
        self._send_json({"name": tag, "ref": f"refs/tags/{tag}", "targetCommit": cid})

    def _delete_tag(self, repo_type: str, repo_id: str, tag: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id, write=True)
        with storage.lock:
            if tag not in repo["tags"]:
                raise ReplyError(404, f"Invalid rev id: {tag}", "RevisionNotFound")
            del repo["tags"][tag]
            storage.save_repo(repo)
        self._send_json({})

    def _create_branch(self, repo_type: str, repo_id: str, branch: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id, write=True)
        body = self._json_body()
        try:
            check_ref_name(branch)
        except ValueError as e:
            raise ReplyError(400, str(e)) from None
        start = self._resolve(repo, str(body.get("startingPoint") or "main"))
        with storage.lock:
            if branch in repo["branches"]:
                raise ReplyError(409, f"Branch {branch!r} already exists")
            repo["branches"][branch] = start
            storage.save_repo(repo)
        self._send_json({})

    def _delete_branch(self, repo_type: str, repo_id: str, branch: str) -> None:
        storage = self.hub.storage
        repo = self._repo(repo_type, repo_id, write=True)
        with storage.lock:
            if branch not in repo["branches"]:
                raise ReplyError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
            if branch == "main":
                raise ReplyError(403, "Cannot delete the default branch")
            del repo["branches"][branch]
            storage.save_repo(repo)
        self._send_json({})


def _parse_range(header: str, size: int):
    """``(start, end)`` inclusive, ``None`` to ignore the header (malformed or several ranges), or
    ``"unsatisfiable"``."""
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not m or (not m.group(1) and not m.group(2)):
        return None
    first, last = m.group(1), m.group(2)
    if not first:
        n = int(last)
        if n == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - n), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        return "unsatisfiable"
    return start, min(end, size - 1)
