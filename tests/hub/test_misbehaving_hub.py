"""Hub hardening (issue 13) against a misbehaving test Hub, through the real huggingface_hub client.

- No read waits for ever: a stalled or trickling answer (API call or file range read) ends in a HubError naming the
  file after the bounded retries, with huggingface_hub's HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT honoured
  (set short here, through the environment).
- Nothing a server sends becomes a local path unchecked: a commit id that is a path is refused; an odd file name
  outside what we read does not make the dataset unopenable.
- A Content-Range other than the one asked for, a short body, a server ignoring Range, a 401/403 on one data file:
  HubError / HubAuthError naming the file (with structured fields), never CorruptSourceError.
- Each metadata file is read once; a pushed repo is inspected with one metadata request (our index file).
- push: checks token and remote before exporting; no token, a refused token, a read-only token, a repo holding
  another dataset all fail before any export; a failed tag update says what the remote holds and a second push
  repairs it; the tag is never left deleted when it can be put back; progress=False hides huggingface_hub's bars;
  a stalled commit ends in bounded time.
"""

from __future__ import annotations

import json
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hub_fixtures import assert_same_frames, files_under, lib_requests, resolve_prefix, running_server, server_env

import lerobot_zarr.hub.http as hub_module
import lerobot_zarr.hub.revisions as hub_revisions
import lerobot_zarr.writing.export as export_module
from lerobot_zarr import (
    CorruptSourceError,
    HubAuthError,
    HubError,
    LeRobotZarrDataset,
    SourceMismatchError,
    inspect,
    open_dataset,
)
from lerobot_zarr.hub import HubFiles
from lerobot_zarr.lerobot.source import LeRobotSource
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

TOKEN, READ_TOKEN = "hf_write", "hf_read"
TAG = "v3.0"
FILE1 = "data/chunk-000/file-001.parquet"  # episodes 2 and 3 of org/ds
# seconds, for both huggingface_hub timeouts in these tests: far longer than the test Hub takes to answer on a loaded
# machine (its handler shares this process), and than a trickle's 0.1 s between pieces
TIMEOUT = 1.0


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    base = tmp_path_factory.mktemp("hardening")
    # data files of ~70 kB: more than the 16 KiB tail read for a footer, so row groups are range reads
    src = write_sample_dataset(base / "src", n_episodes=6, lengths=(60, 80), episodes_per_file=2, state_dim=64,
                               action_dim=64, seed=31)
    server = HubServer(base / "storage", tokens={TOKEN: "alice", READ_TOKEN: "bob"}, read_only=[READ_TOKEN])
    server.src = src
    server.sha = server.add_repo("org/ds", src, tags=[TAG])
    many = write_sample_dataset(base / "many", n_episodes=200, lengths=(2, 4), seed=32)
    server.add_repo("org/many", many, tags=[TAG])
    server.many = many
    odd = server.add_repo("org/odd-names", src, tags=[TAG])
    _forge_tree_entry(base / "storage", odd, "docs/a\\b.txt", "meta/info.json")
    yield from running_server(server)


def _forge_tree_entry(storage: Path, sha: str, new_path: str, copy_of: str) -> None:
    """Add a tree entry the server would refuse in a commit (it is forged into the stored commit document)."""
    doc_path = storage / "commits" / sha[:2] / f"{sha}.json"
    doc = json.loads(doc_path.read_bytes())
    doc["tree"][new_path] = dict(doc["tree"][copy_of])
    doc_path.write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path, hub):
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", str(TIMEOUT))
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", str(TIMEOUT))
    monkeypatch.setattr(hub_module, "_BACKOFF_S", 0.01)
    yield from server_env(monkeypatch, tmp_path, hub)


@pytest.fixture
def local(hub, tmp_path):
    return open_dataset(hub.src, root=tmp_path / "local", progress=False)


def _attempts(hub, path: str) -> list:
    return [r for r in lib_requests(hub, "GET", path)]


def _bounded(call, seconds: float):
    """Run ``call`` (which must raise); return the exception and check it came in bounded time (no hang)."""
    t0 = time.monotonic()
    with pytest.raises(Exception) as info:
        call()
    elapsed = time.monotonic() - t0
    assert elapsed < seconds, f"took {elapsed:.1f} s: the wait is not bounded by the timeouts"
    return info.value


# ------------------------------------------------------------------------------------------------ 1. bounded waits


@pytest.mark.parametrize("after_bytes", [0, 100], ids=["before-headers", "mid-body"])
def test_stalled_range_read_ends_in_hub_error_naming_the_file(hub, env, after_bytes, monkeypatch):
    monkeypatch.setattr(hub_module, "_RETRIES", 2)  # each attempt waits the whole timeout
    hub.inject_fault(path_contains=resolve_prefix("org/ds", hub.sha) + FILE1, kind="stall", count=100,
                     after_bytes=after_bytes)
    exc = _bounded(lambda: open_dataset("org/ds", episodes=[2], progress=False), 20)
    assert type(exc) is HubError, repr(exc)
    assert FILE1 in str(exc) and exc.path == FILE1 and exc.repo_id == "org/ds"
    assert len(_attempts(hub, FILE1)) == hub_module._RETRIES + 1  # bounded retries, each ended by the timeout


def test_trickling_server_is_cut_by_the_request_deadline(hub, env, monkeypatch):
    """16 B/s in pieces every 0.1 s: no read ever waits the 1 s read timeout, the total deadline ends it."""
    monkeypatch.setattr(hub_module, "_RETRIES", 1)
    hub.inject_fault(path_contains=resolve_prefix("org/ds", hub.sha) + FILE1, kind="trickle", rate=16, count=100)
    exc = _bounded(lambda: open_dataset("org/ds", episodes=[2], progress=False), 20)
    assert type(exc) is HubError and FILE1 in str(exc) and "too slow" in str(exc), str(exc)
    assert len(_attempts(hub, FILE1)) == 2


def test_stalled_api_call_ends_in_hub_error(hub, env, monkeypatch):
    monkeypatch.setattr(hub_module, "_RETRIES", 2)
    hub.inject_fault(path_contains="/api/datasets/org/ds/refs", kind="stall", count=100)
    exc = _bounded(lambda: inspect("org/ds"), 20)
    assert type(exc) is HubError and "org/ds" in str(exc), repr(exc)
    assert len(_attempts(hub, "/refs")) == hub_module._RETRIES + 1


def test_trickling_api_answer_is_cut_by_the_call_deadline(hub, env, monkeypatch):
    """The refs answer at 10 B/s in pieces every 0.1 s: no read waits the read timeout; the deadline of the call
    (two timeouts plus 1 s for the body here) ends each attempt. (A read timeout of 3 s: at load 20-35 the server's
    thread was once held past 1 s between two pieces, and the read timed out first.)"""
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "3")
    monkeypatch.setattr(hub_module, "_RETRIES", 1)
    monkeypatch.setattr(hub_module, "_API_BUDGET_BYTES", hub_module._MIN_RATE)
    hub.inject_fault(path_contains="/api/datasets/org/ds/refs", kind="trickle", rate=1, count=100)
    started = time.monotonic()
    exc = _bounded(lambda: inspect("org/ds"), 30)
    assert type(exc) is HubError and "org/ds" in str(exc) and "too slow" in str(exc), repr(exc)
    assert len(_attempts(hub, "/refs")) == 2 and time.monotonic() - started < 60  # without the deadline: 10 min


def test_timeouts_follow_huggingface_hub_environment(monkeypatch):
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "2.5")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1.5")
    assert hub_module.request_timeout("download") == 2.5 and hub_module.request_timeout("api") == 1.5
    monkeypatch.delenv("HF_HUB_DOWNLOAD_TIMEOUT")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 7)
    assert hub_module.request_timeout("download") == 7.0
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "nonsense")  # unusable: huggingface_hub's value
    assert hub_module.request_timeout("download") == 7.0


def test_one_stalled_answer_is_retried(hub, env, local):
    """One slow answer is retried and the data is exact."""
    hub.inject_fault(path_contains=resolve_prefix("org/ds", hub.sha) + FILE1, kind="stall", count=1)
    ds = open_dataset("org/ds", episodes=[2, 3], progress=False)
    assert_same_frames(ds, LeRobotZarrDataset(local.root, episodes=[2, 3]), "after one stalled answer")


def test_no_network_fails_at_once_with_a_pointer_to_offline_use(monkeypatch):
    """A host that does not resolve (no network, a mistyped endpoint): no retries, one HubError saying how to work
    without the network (HF_HUB_OFFLINE, a mirror or the test Hub)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://no-such-host.invalid")
    waits = []
    monkeypatch.setattr(hub_module.time, "sleep", waits.append)
    for call in (lambda: inspect("org/ds"), lambda: open_dataset("org/ds", episodes=[0], progress=False)):
        with pytest.raises(HubError) as info:
            call()
        message = str(info.value)
        assert "cannot reach the Hub at http://no-such-host.invalid" in message, message
        assert "HF_HUB_OFFLINE=1" in message and "lerobot_zarr.testing.hub_server" in message, message
    assert waits == [], "no backoff: the host does not resolve"


# ------------------------------------------------------------------------------------------------ 2. server data


@pytest.mark.parametrize("value", ["../../../../tmp/evil", "g" * 40, "0123456789abcdef0123456789abcdef012345/.", ""])
def test_commit_id_that_is_not_a_sha_is_refused(hub, env, tmp_path, value):
    hub.inject_fault(path_contains="/api/datasets/org/ds/refs", kind="bad_commit", value=value, count=100)
    with pytest.raises(HubError) as info:
        open_dataset("org/ds", progress=False)
    assert "not a 40-hex commit sha" in str(info.value) and "org/ds" in str(info.value)
    assert not lib_requests(hub, "GET", "/tree/") and not lib_requests(hub, "GET", "/resolve/")
    hub_dir = env.zarr_home / "hub"
    assert [p.name for p in hub_dir.rglob("*") if p.is_dir() and p.parent.name == "org--ds"] in ([], ["refs"])
    assert not Path("/tmp/evil").exists()


def test_commit_id_of_a_sha_revision_is_checked(hub, env):
    hub.inject_fault(path_contains="/api/datasets/org/ds/revision/", kind="bad_commit", value="../x", count=100)
    with pytest.raises(HubError, match="not a 40-hex commit sha"):
        inspect("org/ds", revision=hub.sha)
    with pytest.raises(HubError, match="not a 40-hex commit sha"):
        HubFiles("org/ds", "../../etc")


def test_odd_file_name_outside_what_we_read_is_ignored(hub, env, local):
    ds = open_dataset("org/odd-names", episodes=[0, 5], progress=False)
    assert_same_frames(ds, LeRobotZarrDataset(local.root, episodes=[0, 5]), "repo with docs/a\\b.txt")
    assert inspect("org/odd-names").total_episodes == 6


def test_pagination_link_off_the_endpoint_is_refused():
    where = hub_module.Where("org/ds", "main")
    assert hub_revisions._next_link('<http://h:1/api/x?cursor=2>; rel="next"', "http://h:1", where) == \
        "http://h:1/api/x?cursor=2"
    with pytest.raises(HubError, match="outside"):
        hub_revisions._next_link('<http://evil.example/steal>; rel="next"', "http://h:1", where)


# ------------------------------------------------------------------------------------------------ bounded bodies
BOMB = 512 << 20  # bytes a gzip bomb inflates to (the server sends about 0.5 MB)
REFS, INFO = "/api/datasets/org/ds/refs", "/api/datasets/org/ds/revision/"  # ours; HfApi.dataset_info


@pytest.fixture
def patient(monkeypatch):
    """Timeouts far longer than inflating 64 MiB takes on a loaded machine: these tests are about bounds, not time."""
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "60")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "60")


def _peak(call):
    """``(result or exception, peak bytes Python held while call ran)``."""
    tracemalloc.start()
    try:
        try:
            result = call()
        except Exception as exc:  # noqa: BLE001  (the test looks at it)
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("path", [REFS, INFO], ids=["refs", "commit-info"])
def test_gzip_bomb_in_an_hfapi_answer_is_cut_at_the_body_bound(hub, env, patient, path):
    """A refs or commit-info answer that inflates to 512 MiB: read no further than 64 MiB (decoded), retried; the
    next answer is served. Every time: a HubError saying why, after the bounded retries."""
    hub.inject_fault(path_contains=path, kind="gzip_bomb", after_bytes=BOMB, count=1)
    meta, peak = _peak(lambda: inspect("org/ds", revision=hub.sha))
    assert not isinstance(meta, Exception), repr(meta)
    assert meta.total_episodes == 6 and len(_attempts(hub, path)) == 2
    assert peak < 256 << 20, f"{peak / 2**20:.0f} MiB held for a bomb of {BOMB >> 20} MiB: the body is not bounded"
    hub.reset_stats()
    hub.inject_fault(path_contains=path, kind="gzip_bomb", after_bytes=BOMB, count=100)
    exc, peak = _peak(lambda: inspect("org/ds", revision=hub.sha))
    assert type(exc) is HubError and "org/ds" in str(exc) and "more than the 67108864 bytes" in str(exc), repr(exc)
    assert len(_attempts(hub, path)) == hub_module._RETRIES + 1 and peak < 256 << 20


@pytest.mark.parametrize("path", [REFS, INFO], ids=["refs", "commit-info"])
def test_deep_json_in_an_hfapi_answer_is_a_hub_error(hub, env, patient, path):
    hub.inject_fault(path_contains=path, kind="deep_json", after_bytes=100_000, count=100)
    with pytest.raises(HubError, match="nested") as info:
        inspect("org/ds", revision=hub.sha)
    assert "org/ds" in str(info.value) and info.value.repo_id == "org/ds"
    hub.clear_faults()
    hub.inject_fault(path_contains=path, kind="deep_json", after_bytes=65, count=100)  # parses; deeper than the guard
    with pytest.raises(HubError, match="deeper than 64 levels"):
        inspect("org/ds", revision=hub.sha)


@pytest.mark.parametrize("kind", ["gzip_bomb", "deep_json"])
def test_hostile_answers_to_a_push_are_hub_errors_in_bounded_memory(hub, env, patient, local, kind):
    """The commit's answer (read by huggingface_hub's create_commit) is a gzip bomb or a deep JSON: the push ends in
    a HubError saying what the remote holds, without inflating the bomb."""
    repo_id = f"alice/hostile-{kind.replace('_', '-')}"
    hub.inject_fault(path_contains=f"/api/datasets/{repo_id}/commit/", kind=kind, method="POST", count=1,
                     after_bytes=BOMB if kind == "gzip_bomb" else 100_000)
    exc, peak = _peak(lambda: local.push(repo_id, token=TOKEN, progress=False))
    assert type(exc) is HubError and repo_id in str(exc) and "committing" in str(exc), repr(exc)
    assert peak < 256 << 20, f"{peak / 2**20:.0f} MiB held"
    assert local.push(repo_id, token=TOKEN, progress=False) is None  # the commit went through: pushing again tags
    assert hub.refs(repo_id)["tags"] == {TAG: hub.refs(repo_id)["branches"]["main"]}


# ------------------------------------------------------------------------------------------------ 3. bad answers


@pytest.mark.parametrize("kind", ["bad_range", "short"])
def test_wrong_content_range_or_short_body_is_a_hub_error_naming_the_file(hub, env, kind, monkeypatch):
    # the data file read by a range (its footer's tail) as a big file is: this small one is read whole with the
    # estimate of where the episode's rows lie, which reaches back to its first bytes
    monkeypatch.setattr(LeRobotSource, "_row_windows", lambda self, episodes, hints: {})
    hub.inject_fault(path_contains=resolve_prefix("org/ds", hub.sha) + FILE1, kind=kind, after_bytes=10, count=100)
    with pytest.raises(HubError) as info:
        open_dataset("org/ds", episodes=[3], progress=False)
    assert not isinstance(info.value, CorruptSourceError)
    assert FILE1 in str(info.value) and info.value.path == FILE1
    assert ("Content-Range" if kind == "bad_range" else "got 10") in str(info.value), str(info.value)
    assert len(_attempts(hub, FILE1)) == hub_module._RETRIES + 1


@pytest.mark.parametrize("status", [401, 403])
def test_auth_error_on_one_data_file_names_it(hub, env, status):
    hub.inject_fault(path_contains=resolve_prefix("org/ds", hub.sha) + FILE1, kind=str(status), count=100)
    with pytest.raises(HubAuthError) as info:
        open_dataset("org/ds", episodes=[0, 3], progress=False)
    assert isinstance(info.value, PermissionError) and not isinstance(info.value, CorruptSourceError)
    assert FILE1 in str(info.value) and f"HTTP {status}" in str(info.value)
    assert (info.value.path, info.value.status, info.value.repo_id) == (FILE1, status, "org/ds")
    assert len(_attempts(hub, FILE1)) == 1  # not retried


def test_hub_error_fields_after_server_errors(hub, env):
    hub.inject_fault(path_contains=resolve_prefix("org/ds", hub.sha) + FILE1, kind="500", count=100)
    with pytest.raises(HubError) as info:
        open_dataset("org/ds", episodes=[2], progress=False)
    assert (info.value.repo_id, info.value.path, info.value.status) == ("org/ds", FILE1, 500)


# ------------------------------------------------------------------------------------------------ metadata bytes


def test_inspect_reads_each_metadata_file_once(hub, env):
    inspect("org/many")
    for rel in ("meta/info.json", "meta/stats.json", "meta/tasks.parquet", "meta/episodes/chunk-000/file-000.parquet"):
        size = (hub.many / rel).stat().st_size
        served = sum(r.bytes_sent for r in lib_requests(hub, "GET", "/datasets/org/many/resolve/") if
                     r.path.endswith("/" + rel))
        assert 0 < served <= size, f"{rel}: {served} B served for a {size} B file"


def test_inspect_of_a_pushed_repo_reads_only_our_index(hub, env, local):
    local.push("alice/pushed", token=TOKEN, progress=False)
    hub.reset_stats()
    meta = inspect("alice/pushed")
    assert meta.total_episodes == 6 and meta.tasks == local.meta.tasks
    files = [r.path.split("/resolve/", 1)[1].split("/", 1)[1] for r in lib_requests(hub, "GET", "/resolve/")]
    assert files == ["meta/lerobot_zarr_index.json"], files


# ------------------------------------------------------------------------------------------------ 4. push


def _no_export(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("push exported the store before checking the remote")

    monkeypatch.setattr(export_module, "to_lerobot", fail)


def test_push_without_a_token_fails_before_any_request_or_export(hub, env, local, monkeypatch):
    _no_export(monkeypatch)
    for token in (None, False):
        with pytest.raises(HubAuthError, match="token") as info:
            local.push("alice/none", token=token, progress=False)
        assert "alice/none" in str(info.value)
    assert lib_requests(hub) == []


@pytest.mark.parametrize("token, why", [("hf_unknown", "refused the token"), (READ_TOKEN, "read-only")])
def test_push_with_a_refused_or_read_only_token_fails_before_export(hub, env, local, monkeypatch, token, why):
    _no_export(monkeypatch)
    with pytest.raises(HubAuthError, match=why) as info:
        local.push("org/ds", token=token, progress=False)
    assert "org/ds" in str(info.value) and "remote is unchanged" in str(info.value)
    assert not hub.requests("POST") and not hub.requests("PUT")


def test_push_to_a_repo_holding_another_dataset_fails_before_export(hub, env, tmp_path, monkeypatch):
    other = write_sample_dataset(tmp_path / "other", n_episodes=2, lengths=(5, 8), state_dim=3, seed=33)
    store = open_dataset(other, root=tmp_path / "other-store", progress=False)
    _no_export(monkeypatch)
    before = hub.refs("org/ds")
    with pytest.raises(SourceMismatchError, match="another dataset"):
        store.push("org/ds", token=TOKEN, progress=False)
    assert hub.refs("org/ds") == before and not hub.requests("POST")


def test_failed_tag_on_a_new_repo_says_so_and_push_again_retags(hub, env, local):
    repo_id = "alice/tag-new"
    hub.inject_fault(path_contains=f"/api/datasets/{repo_id}/tag/", kind="500", method="POST", count=1)
    with pytest.raises(HubError) as info:
        local.push(repo_id, token=TOKEN, progress=False)
    head = hub.refs(repo_id)["branches"]["main"]
    # on a loaded machine the commit's own answer may time out first: the message then says so between the two
    message = str(info.value)
    assert f"main moved to {head}" in message and f"tag {TAG} is missing; run push again to retag" in message, message
    assert TAG not in hub.refs(repo_id)["tags"]
    assert local.push(repo_id, token=TOKEN, progress=False) is None  # nothing to upload: it only retags
    assert hub.refs(repo_id) == {"branches": {"main": head}, "tags": {TAG: head}}


def _edited_copy(local, tmp_path) -> LeRobotZarrDataset:
    """The same dataset (features, fps, robot type) with other values: what an edited store pushes."""
    other = write_sample_dataset(tmp_path / "edited-src", n_episodes=6, lengths=(60, 80), episodes_per_file=2,
                                 state_dim=64, action_dim=64, seed=34)
    ds = open_dataset(other, root=tmp_path / "edited", progress=False)
    assert ds.meta.info["features"] == local.meta.info["features"]
    assert not np.array_equal(ds.get_batch(np.arange(10))["action"], local.get_batch(np.arange(10))["action"])
    return ds


@pytest.mark.parametrize("failures, state", [(1, "still points at"), (2, "is missing")])
def test_failed_retag_puts_the_old_tag_back_where_it_can(hub, env, local, tmp_path, failures, state):
    repo_id = f"alice/retag-{failures}"
    old = local.push(repo_id, token=TOKEN, progress=False)
    edited = _edited_copy(local, tmp_path)
    hub.inject_fault(path_contains=f"/api/datasets/{repo_id}/tag/", kind="500", method="POST", count=failures)
    with pytest.raises(HubError) as info:
        edited.push(repo_id, token=TOKEN, progress=False)
    refs = hub.refs(repo_id)
    new = refs["branches"]["main"]
    assert new != old
    message = str(info.value)
    assert f"main moved to {new}; tag {TAG} {state}" in message and "run push again" in message, message
    assert refs["tags"] == ({TAG: old} if failures == 1 else {})
    assert edited.push(repo_id, token=TOKEN, progress=False) is None
    assert hub.refs(repo_id)["tags"] == {TAG: new}


def test_failed_tag_delete_leaves_the_old_tag(hub, env, local, tmp_path):
    repo_id = "alice/retag-delete"
    old = local.push(repo_id, token=TOKEN, progress=False)
    edited = _edited_copy(local, tmp_path)
    hub.inject_fault(path_contains=f"/api/datasets/{repo_id}/tag/", kind="500", method="DELETE", count=1)
    with pytest.raises(HubError, match=f"tag {TAG} still points at {old}"):
        edited.push(repo_id, token=TOKEN, progress=False)
    assert hub.refs(repo_id)["tags"] == {TAG: old}


def test_commit_whose_answer_stalls_ends_in_bounded_time_saying_what_the_remote_holds(hub, env, local):
    """The server makes the commit, then never answers: the push times out, reads the branch back and says the
    commit went through without its tag; pushing again only tags."""
    repo_id = "alice/stalled-commit"
    hub.inject_fault(path_contains=f"/api/datasets/{repo_id}/commit/", kind="stall", method="POST", count=1)
    exc = _bounded(lambda: local.push(repo_id, token=TOKEN, progress=False), 30)
    head = hub.refs(repo_id)["branches"]["main"]
    message = str(exc)
    assert isinstance(exc, HubError) and f"main moved to {head} (the commit went through" in message, message
    assert f"tag {TAG} is missing; run push again to retag" in message, message
    assert local.push(repo_id, token=TOKEN, progress=False) is None
    assert hub.refs(repo_id)["tags"] == {TAG: head}


def test_concurrent_commit_fails_the_push_whole_and_says_so(hub, env, local, tmp_path):
    """Another commit lands on the branch between the checks and our commit: ours is refused (its parent is
    checked), the message says the branch moved by another commit, and pushing again goes through."""
    from lerobot_zarr.hub.publish import Publisher

    repo_id = "alice/concurrent"
    first = local.push(repo_id, token=TOKEN, progress=False)
    edited = _edited_copy(local, tmp_path)
    folder = edited.to_lerobot(tmp_path / "export", progress=False)
    publisher = Publisher(repo_id, token=TOKEN, progress=False)
    publisher.check()
    other = hub.commit_files(repo_id, {"notes.txt": b"someone else"}, message="meanwhile")
    with pytest.raises(HubError) as info:
        publisher.publish(Path(folder), None)
    message = str(info.value)
    assert f"main moved to {other} by another commit meanwhile, nothing of this push was committed" in message
    assert hub.refs(repo_id) == {"branches": {"main": other}, "tags": {TAG: first}}
    new = edited.push(repo_id, token=TOKEN, progress=False)
    assert hub.refs(repo_id) == {"branches": {"main": new}, "tags": {TAG: new}}
    assert "notes.txt" in hub.list_files(repo_id)


def test_push_progress_false_hides_huggingface_hub_bars(hub, env, local, capfd):
    from huggingface_hub.utils import are_progress_bars_disabled

    before = are_progress_bars_disabled()
    capfd.readouterr()
    local.push("alice/quiet", token=TOKEN, progress=False)
    quiet = capfd.readouterr().err
    assert are_progress_bars_disabled() == before, "push changed huggingface_hub's progress bar setting"
    with pytest.MonkeyPatch.context() as mp:  # huggingface_hub's bars are drawn on a terminal only
        mp.setattr(sys.stderr, "isatty", lambda: True)
        local.push("alice/loud", token=TOKEN, progress=True)
    loud = capfd.readouterr().err
    if before:
        pytest.skip("huggingface_hub's progress bars are disabled in this process: nothing to compare")
    assert "Upload" in loud or "%|" in loud, "the control push showed no bars: the check would prove nothing"
    assert "%|" not in quiet and "Upload" not in quiet, quiet[-500:]


def test_push_then_open_uses_the_new_index(hub, env, local, tmp_path):
    local.push("alice/roundtrip", token=TOKEN, progress=False)
    hub.reset_stats()
    ds = open_dataset("alice/roundtrip", episodes=[4], root=tmp_path / "rt", progress=False)
    assert_same_frames(ds, LeRobotZarrDataset(local.root, episodes=[4]), "pushed and reopened")
    meta = [r.path for r in lib_requests(hub, "GET", "/meta/")]
    assert len(meta) == 1 and meta[0].endswith("meta/lerobot_zarr_index.json"), meta
    assert files_under(env.hf_cache) == []
