"""The test Hub server (lerobot_zarr.testing.hub_server) driven by the real huggingface_hub client.

Nothing here monkeypatches the client's logic: only its settings (Xet off, telemetry off, offline mode off, token
and cache locations isolated) are set, and every call goes over HTTP to a server on 127.0.0.1.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import time

import huggingface_hub
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    HfFileSystem,
    hf_hub_download,
    snapshot_download,
)
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from lerobot_zarr.testing.hub_server import HubServer

TOKEN = "hf_test_token_alice"
REPO = "org/sample"
PRIVATE = "org/secret"
PARQUET = "data/chunk-000/file-000.parquet"
VIDEO = "videos/chunk-000/episode_000000.mp4"

# huggingface_hub's LFS upload passes a file object as `data=`, which httpx2 deprecates: not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")


@pytest.fixture(autouse=True)
def _hf_settings(monkeypatch, tmp_path):
    """Settings the client reads at call time: no Xet (this server has none), no telemetry, online, no token or
    cache of the developer's leaking in."""
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "hf_home" / "token"))
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf_home" / "hub"))
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)


def _write_parquet(path, n_groups=8, rows=32768):
    rng = np.random.default_rng(0)
    table = pa.table({"x": rng.random(n_groups * rows), "i": np.arange(n_groups * rows, dtype=np.int64)})
    pq.write_table(table, path, row_group_size=rows, compression="none")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    (root / "meta").mkdir()
    (root / "data" / "chunk-000").mkdir(parents=True)
    (root / "videos" / "chunk-000").mkdir(parents=True)
    (root / "README.md").write_text("---\nlicense: apache-2.0\n---\n# sample\n")
    (root / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v3.0", "fps": 30}))
    _write_parquet(root / PARQUET)
    (root / VIDEO).write_bytes(np.random.default_rng(1).bytes(600_000))
    return root


@pytest.fixture(scope="module")
def hub(tmp_path_factory, source):
    server = HubServer(tmp_path_factory.mktemp("hub"), tokens={TOKEN: "alice"})
    server.sha = server.add_repo(REPO, source, tags=["v3.0"])
    server.private_sha = server.add_repo(PRIVATE, source, private=True)
    with server:
        yield server
    assert server.errors == []


@pytest.fixture(autouse=True)
def _no_server_errors(request):
    yield
    if "hub" in request.fixturenames:
        errors = request.getfixturevalue("hub").errors
        assert errors == [], errors[0]


@pytest.fixture()
def api(hub):
    return HfApi(endpoint=hub.endpoint, token=False)


@pytest.fixture()
def auth_api(hub):
    return HfApi(endpoint=hub.endpoint, token=TOKEN)


def _fs(hub, token=False):
    return HfFileSystem(endpoint=hub.endpoint, token=token, skip_instance_cache=True)


# ------------------------------------------------------------------------------------------------- reading


def test_dataset_info_files_refs_and_tree(hub, api, source):
    info = api.dataset_info(REPO)
    assert info.id == REPO and info.sha == hub.sha and info.private is False
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes == {p: (source / p).stat().st_size for p in ["README.md", "meta/info.json", PARQUET, VIDEO]}
    assert api.dataset_info(REPO, revision="v3.0").sha == hub.sha
    assert api.dataset_info(REPO, revision=hub.sha).sha == hub.sha

    assert sorted(api.list_repo_files(REPO, repo_type="dataset")) == sorted(sizes)
    refs = api.list_repo_refs(REPO, repo_type="dataset")
    assert [(b.name, b.ref, b.target_commit) for b in refs.branches] == [("main", "refs/heads/main", hub.sha)]
    assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [("v3.0", "refs/tags/v3.0", hub.sha)]

    top = {e.path: e for e in api.list_repo_tree(REPO, repo_type="dataset")}
    assert set(top) == {"README.md", "meta", "data", "videos"}
    assert type(top["data"]).__name__ == "RepoFolder" and len(top["data"].tree_id) == 40
    deep = {e.path: e for e in api.list_repo_tree(REPO, "data", recursive=True, expand=True, repo_type="dataset")}
    assert set(deep) == {"data/chunk-000", PARQUET}
    parquet = deep[PARQUET]
    assert parquet.lfs is not None and parquet.lfs.size == parquet.size == (source / PARQUET).stat().st_size
    assert parquet.last_commit.oid == hub.sha
    readme = next(e for e in api.list_repo_tree(REPO, repo_type="dataset") if e.path == "README.md")
    assert readme.lfs is None
    assert readme.blob_id == huggingface_hub.utils.sha.git_hash((source / "README.md").read_bytes())


def test_get_paths_info(api, source):
    infos = {i.path: i for i in api.get_paths_info(REPO, ["meta/info.json", "data", VIDEO, "nope.txt"],
                                                       repo_type="dataset")}  # fmt: skip
    assert set(infos) == {"meta/info.json", "data", VIDEO}
    assert infos[VIDEO].lfs.sha256 == huggingface_hub.utils.sha.sha_fileobj(open(source / VIDEO, "rb")).hex()
    assert infos["meta/info.json"].size == (source / "meta/info.json").stat().st_size


def test_tree_pagination_follows_link_header(hub, api, tmp_path):
    folder = tmp_path / "many"
    for i in range(23):
        (folder / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (folder / f"d{i % 3}" / f"f{i:02d}.txt").write_text(str(i))
    hub.add_repo("org/many", folder)
    hub.tree_page_size = 4
    try:
        hub.reset_stats()
        entries = list(api.list_repo_tree("org/many", recursive=True, repo_type="dataset"))
    finally:
        hub.tree_page_size = 1000
    assert len(entries) == 23 + 3 and len({e.path for e in entries}) == 26
    assert len(hub.requests("GET", "/api/datasets/org/many/tree/")) == 7  # ceil(26 / 4)


def test_model_and_space_repos_and_settings(hub, auth_api, source, tmp_path):
    sha = hub.add_repo("org/model", source / "meta", repo_type="model")
    sha_space = hub.add_repo("org/space", source / "meta", repo_type="space")
    kw = dict(endpoint=hub.endpoint, cache_dir=tmp_path, token=False)
    path = hf_hub_download("org/model", "info.json", **kw)
    assert open(path, "rb").read() == (source / "meta/info.json").read_bytes()
    assert hf_hub_download("org/space", "info.json", repo_type="space", **kw).endswith(f"{sha_space}/info.json")
    assert HfApi(endpoint=hub.endpoint, token=False).model_info("org/model").sha == sha
    with pytest.raises(RepositoryNotFoundError):  # same id, other type
        auth_api.dataset_info("org/model")

    auth_api.update_repo_settings("org/model", private=True)
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=hub.endpoint, token=False).model_info("org/model")
    assert auth_api.model_info("org/model").private is True


def test_hf_hub_download_cache_and_snapshot(hub, source, tmp_path):
    cache = tmp_path / "cache"
    hub.reset_stats()
    path = hf_hub_download(REPO, PARQUET, repo_type="dataset", endpoint=hub.endpoint, cache_dir=cache, token=False)
    assert open(path, "rb").read() == (source / PARQUET).read_bytes()
    assert f"/snapshots/{hub.sha}/" in path
    assert hub.bytes_sent(f"/datasets/{REPO}/resolve/") == (source / PARQUET).stat().st_size

    hub.reset_stats()  # cached: a HEAD only, no body
    hf_hub_download(REPO, PARQUET, repo_type="dataset", endpoint=hub.endpoint, cache_dir=cache, token=False)
    assert [r.method for r in hub.requests()] == ["HEAD"] and hub.bytes_sent() == 0
    hub.reset_stats()  # pinned to a commit sha that is cached: no request at all
    hf_hub_download(REPO, PARQUET, repo_type="dataset", revision=hub.sha, endpoint=hub.endpoint, cache_dir=cache)
    assert hub.requests() == []

    snap = snapshot_download(REPO, repo_type="dataset", revision="v3.0", endpoint=hub.endpoint,
                             cache_dir=tmp_path / "snap", token=False)  # fmt: skip
    for rel in ["README.md", "meta/info.json", PARQUET, VIDEO]:
        assert open(os.path.join(snap, rel), "rb").read() == (source / rel).read_bytes()


def test_hf_hub_download_recovers_from_dropped_connections(hub, api, source, tmp_path):
    # http_get writes the body in 10 MiB chunks and resumes from what it wrote, with `Range: bytes=N-`.
    # A drop inside the first chunk so restarts from 0; a drop past it resumes.
    hub.reset_stats()
    hub.inject_fault(path_contains=f"/resolve/main/{VIDEO}", kind="drop", after_bytes=100_000, method="GET")
    path = hf_hub_download(REPO, VIDEO, repo_type="dataset", endpoint=hub.endpoint, cache_dir=tmp_path, token=False)
    assert open(path, "rb").read() == (source / VIDEO).read_bytes()
    assert [(r.range, r.bytes_sent) for r in hub.requests("GET", VIDEO)] == [(None, 100_000), (None, 600_000)]

    big = tmp_path / "big"
    big.mkdir()
    data = np.random.default_rng(4).bytes(12 * 1024 * 1024)
    (big / "big.dat").write_bytes(data)
    hub.add_repo("org/big", big)
    assert next(iter(api.get_paths_info("org/big", "big.dat", repo_type="dataset"))).lfs is not None  # > 10 MiB
    hub.reset_stats()
    hub.inject_fault(path_contains="/resolve/main/big.dat", kind="drop", after_bytes=11 * 1024 * 1024, method="GET")
    path = hf_hub_download("org/big", "big.dat", repo_type="dataset", endpoint=hub.endpoint, cache_dir=tmp_path)
    assert open(path, "rb").read() == data
    gets = hub.requests("GET", "big.dat")
    assert [(r.range, r.status) for r in gets] == [(None, 200), (f"bytes={10 * 1024 * 1024}-", 206)]
    assert gets[1].bytes_sent == 2 * 1024 * 1024


def test_hffs_range_read_transfers_only_requested_bytes(hub, source):
    fs = _fs(hub)
    data = (source / VIDEO).read_bytes()
    hub.reset_stats()
    with fs.open(f"datasets/{REPO}/{VIDEO}", "rb", cache_type="none") as f:
        f.seek(123_456)
        assert f.read(100) == data[123_456:123_556]
    assert hub.bytes_sent(f"/datasets/{REPO}/resolve/") == 100
    (get,) = hub.requests("GET", "/resolve/")
    assert get.range == "bytes=123456-123555" and get.status == 206


def test_pyarrow_reads_one_row_group_through_hffs(hub, source):
    fs = _fs(hub)
    local = pq.ParquetFile(source / PARQUET)
    size = (source / PARQUET).stat().st_size
    group_bytes = local.metadata.row_group(5).total_byte_size
    hub.reset_stats()
    with fs.open(f"datasets/{REPO}/{PARQUET}", "rb", cache_type="none") as f:
        remote = pq.ParquetFile(f).read_row_group(5)
    assert remote.equals(local.read_row_group(5))
    sent = hub.bytes_sent(f"/datasets/{REPO}/resolve/")
    assert group_bytes <= sent < group_bytes + 100_000 < size / 2


def test_missing_repo_revision_and_entry(hub, api, tmp_path):
    with pytest.raises(RepositoryNotFoundError) as e:
        api.dataset_info("org/missing")
    assert e.value.response.status_code == 404
    with pytest.raises(RevisionNotFoundError):
        api.dataset_info(REPO, revision="nope")
    with pytest.raises(RevisionNotFoundError):
        list(api.list_repo_tree(REPO, revision="nope", repo_type="dataset"))
    kw = dict(repo_type="dataset", endpoint=hub.endpoint, cache_dir=tmp_path, token=False)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("org/missing", "README.md", **kw)
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "README.md", revision="nope", **kw)
    with pytest.raises(EntryNotFoundError) as e:
        hf_hub_download(REPO, "missing.txt", **kw)
    assert e.value.response.headers["X-Repo-Commit"] == hub.sha
    with pytest.raises(FileNotFoundError):
        _fs(hub).open(f"datasets/{REPO}/missing.txt", "rb")


def test_private_repo_needs_a_valid_token(hub, api, auth_api, source, tmp_path):
    with pytest.raises(RepositoryNotFoundError) as e:  # 401 + X-Error-Code RepoNotFound, as the Hub answers
        api.dataset_info(PRIVATE)
    assert e.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError) as e:
        hf_hub_download(PRIVATE, "README.md", repo_type="dataset", endpoint=hub.endpoint, cache_dir=tmp_path,
                        token=False)  # fmt: skip
    assert e.value.response.status_code == 401
    bad = HfApi(endpoint=hub.endpoint, token="hf_wrong")
    for call in (lambda: bad.dataset_info(PRIVATE), lambda: bad.dataset_info(REPO)):
        with pytest.raises(HfHubHTTPError) as e:
            call()
        assert e.value.response.status_code == 401 and not isinstance(e.value, RepositoryNotFoundError)

    assert auth_api.dataset_info(PRIVATE).private is True
    path = hf_hub_download(PRIVATE, "README.md", repo_type="dataset", endpoint=hub.endpoint, cache_dir=tmp_path,
                           token=TOKEN)  # fmt: skip
    assert open(path, "rb").read() == (source / "README.md").read_bytes()
    with _fs(hub, TOKEN).open(f"datasets/{PRIVATE}/{VIDEO}", "rb", cache_type="none") as f:
        assert f.read(10) == (source / VIDEO).read_bytes()[:10]
    assert auth_api.whoami()["name"] == "alice"


# ------------------------------------------------------------------------------------------------- writing


def _make_upload_folder(root, info: dict):
    (root / "meta").mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "README.md").write_text("---\nlicense: mit\n---\n# pushed\n")
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (root / "data" / "table.parquet").write_bytes(np.random.default_rng(2).bytes(300_000))  # LFS by extension
    (root / "data" / "raw.dat").write_bytes(b"\0" * 10 + np.random.default_rng(3).bytes(5_000))  # LFS: binary
    return root


def test_writes_need_a_token(hub, api):
    with pytest.raises(HfHubHTTPError) as e:
        api.create_repo("alice/anon", repo_type="dataset")
    assert e.value.response.status_code == 401


def test_create_upload_tag_and_reupload(hub, auth_api, tmp_path):
    repo = "alice/pushed"
    folder = _make_upload_folder(tmp_path / "up", {"fps": 30})
    url = auth_api.create_repo(repo, repo_type="dataset", private=True)
    assert url.repo_id == repo and url.repo_type == "dataset"
    assert auth_api.create_repo(repo, repo_type="dataset", exist_ok=True).repo_id == repo
    with pytest.raises(HfHubHTTPError) as e:
        auth_api.create_repo(repo, repo_type="dataset")
    assert e.value.response.status_code == 409

    hub.reset_stats()
    first = auth_api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=folder, commit_message="push 1")
    puts = hub.requests("PUT")
    lfs_sizes = sorted((folder / p).stat().st_size for p in ["data/table.parquet", "data/raw.dat"])
    assert sorted(r.bytes_received for r in puts) == lfs_sizes and all(r.status == 200 for r in puts)
    assert all("authorization" not in r.path for r in puts)
    assert len(hub.requests("POST", f"/api/datasets/{repo}/commit/main")) == 1
    assert hub.refs(repo)["branches"]["main"] == first.oid
    assert sorted(auth_api.list_repo_files(repo, repo_type="dataset")) == [
        "README.md", "data/raw.dat", "data/table.parquet", "meta/info.json",
    ]  # fmt: skip
    for rel in ["data/table.parquet", "meta/info.json", "data/raw.dat"]:
        assert hub.get_file(repo, rel) == (folder / rel).read_bytes()
    tree = {e.path: e for e in auth_api.list_repo_tree(repo, "data", repo_type="dataset")}
    assert tree["data/raw.dat"].lfs is not None and tree["data/table.parquet"].lfs is not None
    path = hf_hub_download(repo, "data/table.parquet", repo_type="dataset", endpoint=hub.endpoint,
                           cache_dir=tmp_path / "c", token=TOKEN)  # fmt: skip
    assert open(path, "rb").read() == (folder / "data/table.parquet").read_bytes()

    auth_api.create_tag(repo, tag="v1.0", repo_type="dataset")
    refs = auth_api.list_repo_refs(repo, repo_type="dataset")
    assert [(t.name, t.target_commit) for t in refs.tags] == [("v1.0", first.oid)]
    with pytest.raises(HfHubHTTPError) as e:
        auth_api.create_tag(repo, tag="v1.0", repo_type="dataset")
    assert e.value.response.status_code == 409

    # The same folder again: preupload returns the stored oids, the LFS batch returns no actions, the client
    # skips the commit: no file byte goes up.
    n_commits = len(hub.commits(repo))
    hub.reset_stats()
    again = auth_api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=folder)
    assert again.oid == first.oid and len(hub.commits(repo)) == n_commits
    assert hub.requests("PUT") == [] and hub.requests("POST", "/commit/") == []
    (batch,) = hub.requests("POST", ".git/info/lfs/objects/batch")
    assert batch.status == 200
    assert sum(r.bytes_received for r in hub.requests()) < 5_000

    # One regular file changed: one small commit, still no LFS upload.
    (folder / "meta" / "info.json").write_text(json.dumps({"fps": 60}))
    hub.reset_stats()
    second = auth_api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=folder)
    assert second.oid != first.oid and hub.requests("PUT") == []
    (commit,) = hub.requests("POST", "/commit/")
    assert commit.bytes_received < 2_000
    assert json.loads(hub.get_file(repo, "meta/info.json")) == {"fps": 60}
    assert hub.get_file(repo, "meta/info.json", revision="v1.0") == b'{"fps": 30}'

    # An LFS object already in the repo under another path: no upload either.
    hub.reset_stats()
    auth_api.upload_file(path_or_fileobj=str(folder / "data/table.parquet"), path_in_repo="copy/table.parquet",
                         repo_id=repo, repo_type="dataset")  # fmt: skip
    assert hub.requests("PUT") == []
    assert hub.get_file(repo, "copy/table.parquet") == (folder / "data/table.parquet").read_bytes()


def test_commit_deletions_parent_check_and_noop_commit(hub, auth_api):
    repo = "alice/ops"
    auth_api.create_repo(repo, repo_type="dataset")
    head = hub.commit_files(repo, {"a/1.txt": b"one", "a/2.txt": b"two", "b.txt": b"bee"}, message="seed")
    info = auth_api.create_commit(
        repo, [CommitOperationDelete("a/"), CommitOperationAdd("c.txt", b"sea")],
        commit_message="ops", repo_type="dataset", parent_commit=head,
    )  # fmt: skip
    assert hub.list_files(repo) == ["b.txt", "c.txt"]
    assert hub.commits(repo)[0]["id"] == info.oid and hub.commits(repo)[0]["message"] == "ops"
    with pytest.raises(HfHubHTTPError) as e:
        auth_api.create_commit(repo, [CommitOperationAdd("d.txt", b"d")], commit_message="stale",
                               repo_type="dataset", parent_commit=head)  # fmt: skip
    assert e.value.response.status_code == 412
    with pytest.raises(EntryNotFoundError):
        auth_api.create_commit(repo, [CommitOperationDelete("nope.txt")], commit_message="x", repo_type="dataset")

    noop = hub.commit_files(repo, {}, message="nothing")  # a commit that changes nothing is still recorded
    log = hub.commits(repo)
    assert log[0]["id"] == noop and log[0]["parent"] == info.oid and log[0]["tree"] == log[1]["tree"]
    assert [c.commit_id for c in auth_api.list_repo_commits(repo, repo_type="dataset")][:2] == [noop, info.oid]


# ------------------------------------------------------------------------------------------------- faults


def test_injected_500_on_head_is_retried_by_hf_hub_download(hub, source, tmp_path):
    hub.reset_stats()
    hub.inject_fault(path_contains="/resolve/main/meta/info.json", kind="500", method="HEAD")
    path = hf_hub_download(REPO, "meta/info.json", repo_type="dataset", endpoint=hub.endpoint, cache_dir=tmp_path,
                           token=False)  # fmt: skip
    assert open(path, "rb").read() == (source / "meta/info.json").read_bytes()
    assert [r.status for r in hub.requests("HEAD")] == [500, 200]


def test_injected_500_on_get_raises_from_hf_hub_download(hub, source, tmp_path):
    # http_get retries only 408/429 and network errors: a 500 on the body request surfaces as HfHubHTTPError.
    hub.inject_fault(path_contains="/resolve/main/README.md", kind="500", method="GET")
    kw = dict(repo_type="dataset", endpoint=hub.endpoint, cache_dir=tmp_path, token=False)
    with pytest.raises(HfHubHTTPError) as e:
        hf_hub_download(REPO, "README.md", **kw)
    assert e.value.response.status_code == 500
    assert open(hf_hub_download(REPO, "README.md", **kw), "rb").read() == (source / "README.md").read_bytes()


def test_hffs_range_read_retries_500_and_api_retries_reset(hub, source, api):
    hub.reset_stats()
    hub.inject_fault(path_contains=f"/resolve/main/{VIDEO}", kind="500", method="GET")
    t0 = time.monotonic()
    with _fs(hub).open(f"datasets/{REPO}/{VIDEO}", "rb", cache_type="none") as f:
        f.seek(1000)
        assert f.read(50) == (source / VIDEO).read_bytes()[1000:1050]
    assert [r.status for r in hub.requests("GET", "/resolve/")] == [500, 206]
    assert time.monotonic() - t0 >= 1  # http_backoff waited before retrying

    hub.inject_fault(path_contains="/api/datasets/org/sample/tree/", kind="reset")
    assert len(list(api.list_repo_tree(REPO, repo_type="dataset"))) == 4  # paginated listing retries


# ------------------------------------------------------------------------------------------------- protocol


def _conn(hub):
    host, port = hub.endpoint.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=10)


def test_ranges_headers_and_keep_alive(hub, source):
    data = (source / VIDEO).read_bytes()
    size = len(data)
    url = f"/datasets/{REPO}/resolve/main/{VIDEO}"
    conn = _conn(hub)
    hub.reset_stats()

    conn.request("HEAD", url)
    r = conn.getresponse()
    assert r.status == 200 and r.read() == b""
    assert int(r.getheader("Content-Length")) == size == int(r.getheader("X-Linked-Size"))
    sha256 = huggingface_hub.utils.sha.sha_fileobj(open(source / VIDEO, "rb")).hex()
    assert r.getheader("ETag") == r.getheader("X-Linked-Etag") == f'"{sha256}"'
    assert r.getheader("X-Repo-Commit") == hub.sha and r.getheader("Accept-Ranges") == "bytes"

    cases = {
        "bytes=0-9": (206, data[:10], f"bytes 0-9/{size}"),
        f"bytes={size - 5}-": (206, data[-5:], f"bytes {size - 5}-{size - 1}/{size}"),
        "bytes=-7": (206, data[-7:], f"bytes {size - 7}-{size - 1}/{size}"),
        f"bytes=10-{size + 100}": (206, data[10:], f"bytes 10-{size - 1}/{size}"),
        f"bytes={size}-": (416, None, f"bytes */{size}"),
        "bytes=9-3": (200, data, None),  # invalid: ignored
    }
    for header, (status, body, content_range) in cases.items():
        conn.request("GET", url, headers={"Range": header})
        r = conn.getresponse()
        got = r.read()
        assert (r.status, r.getheader("Content-Range")) == (status, content_range), header
        if body is not None:
            assert got == body and int(r.getheader("Content-Length")) == len(body)

    conn.request("GET", f"/datasets/{REPO}/resolve/main/README.md")
    r = conn.getresponse()
    assert r.read() == (source / "README.md").read_bytes()
    assert r.getheader("ETag") == f'"{huggingface_hub.utils.sha.git_hash((source / "README.md").read_bytes())}"'
    assert r.getheader("X-Linked-Etag") is None
    conn.close()
    assert len({rec.connection for rec in hub.requests()}) == 1  # all on one kept-alive connection


def test_rejects_traversal_and_forged_uploads(hub, tmp_path):
    conn = _conn(hub)
    for url in [
        f"/datasets/{REPO}/resolve/main/../../../etc/passwd",
        f"/datasets/{REPO}/resolve/main/..%2F..%2Fetc%2Fpasswd",
        f"/datasets/{REPO}/resolve/main/%2Fetc%2Fpasswd",
        "/datasets/..%2F../sample/resolve/main/README.md",
        "/api/datasets/org/sample/tree/main/..%2F..",
    ]:
        conn.request("GET", url)
        r = conn.getresponse()
        r.read()
        assert r.status == 400, url
    conn.request("PUT", f"/__lfs/datasets/{REPO}/{'0' * 64}?size=3&sig=forged", body=b"abc")
    r = conn.getresponse()
    r.read()
    assert r.status == 403
    conn.close()

    conn = _conn(hub)
    lines = [{"key": "header", "value": {"summary": "evil"}},
             {"key": "file", "value": {"path": "../escape.txt", "content": base64.b64encode(b"x").decode(),
                                       "encoding": "base64"}}]  # fmt: skip
    conn.request("POST", f"/api/datasets/{REPO}/commit/main", body="\n".join(json.dumps(x) for x in lines),
                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"})  # fmt: skip
    r = conn.getresponse()
    r.read()
    assert r.status == 400
    conn.close()
    for bad in ["../x", "org/../x", "/abs", "a/b/c"]:
        with pytest.raises(ValueError):
            hub.add_repo(bad)
    with pytest.raises(ValueError):
        hub.commit_files(REPO, {"../x.txt": b"x"})
    assert not (tmp_path.parent / "escape.txt").exists()


def test_state_persists_across_restarts(hub, tmp_path):
    with HubServer(hub.storage_dir, tokens={TOKEN: "alice"}) as again:
        assert HfApi(endpoint=again.endpoint, token=False).dataset_info(REPO).sha == hub.sha
        assert again.refs(REPO)["tags"] == {"v3.0": hub.sha}
