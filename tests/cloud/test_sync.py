"""Publishing a store to a bucket (push_store, ``lerobot-zarr sync``): packs first, the root last with a
conditional write; a publication killed at any point leaves the bucket readable at its last commit and the next one
completes it; unchanged files are not uploaded again; two publishers never lose a commit; copying back."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import s3_fixtures

import lerobot_zarr
import lerobot_zarr.writing.sync as sync
from lerobot_zarr.errors import CommitConflictError, StoreLockedError
from lerobot_zarr.testing.hub_network import NetworkModel
from lerobot_zarr.testing.sample_data import write_sample_dataset
from lerobot_zarr.testing.source_tests import assert_same_batches
from lerobot_zarr.writing.sync import LEASE, LEASE_SECONDS, _Lease, pull_store, push_store

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test

REPO = Path(__file__).resolve().parents[2]
CAM = "observation.images.cam"
PUSH = ("import sys\nfrom lerobot_zarr.writing.sync import push_store\n"
        "push_store(sys.argv[1], sys.argv[2], progress=False, on_file=lambda rel: print(rel, flush=True))\n"
        "print('DONE', flush=True)\n")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_sample_dataset(tmp_path_factory.mktemp("sync") / "src", n_episodes=8, lengths=(15, 30),
                                image_keys=(CAM,), seed=11)


def make_store(folder: Path, root: Path, episodes=None) -> Path:
    return lerobot_zarr.open_dataset(folder, root=root, episodes=episodes, progress=False, pack_bytes=1 << 14).root


def add_episode(store: Path, source_episode: int, task: str) -> None:
    with lerobot_zarr.open_dataset(store, mode="r+") as w:
        ep = w.episode(source_episode)
        w.add_episode({k: np.asarray(ep[k]) * (1 if k == CAM else 2) for k in ("observation.state", "action", CAM)},
                      task=task)


def snapshot(store: Path, where: Path) -> Path:
    """A copy of the store as it is (to compare with a commit of the bucket later)."""
    shutil.copytree(store, where, ignore=shutil.ignore_patterns(".lock", ".sync"))
    return where


def test_publish_skip_unchanged_and_refuse_another_history(env, folder, tmp_path):
    store = make_store(folder, tmp_path / "store")
    url = env.url("pub")
    first = push_store(store, url, progress=False)
    assert first.committed and first.uploaded and not first.skipped
    puts = [r.path for r in env.server.requests("PUT")]
    assert puts[-1].endswith("/pub/zarr.json") and sum(p.endswith("/pub/zarr.json") for p in puts) == 1  # last
    assert_same_batches(lerobot_zarr.open_dataset(url), lerobot_zarr.open_dataset(store), "published")
    again = push_store(store, url, progress=False)
    assert not again.committed and not again.uploaded and again.etag == first.etag
    add_episode(store, 2, "more")
    env.server.reset_stats()
    third = push_store(store, url, progress=False)
    assert third.committed and 0 < len(third.uploaded) < len(first.uploaded)  # unchanged packs stay where they are
    assert_same_batches(lerobot_zarr.open_dataset(url), lerobot_zarr.open_dataset(store), "after an append")
    record = json.loads(next((store / ".sync").iterdir()).read_text())
    assert record["url"] == url and "secret" not in json.dumps(record).lower()
    other = make_store(folder, tmp_path / "other", episodes=[0, 1])
    with pytest.raises(CommitConflictError, match="did not publish"):
        push_store(other, url, progress=False)
    assert lerobot_zarr.open_dataset(url).meta.total_episodes == 9  # untouched
    assert push_store(other, url, progress=False, force=True).committed
    assert_same_batches(lerobot_zarr.open_dataset(url), lerobot_zarr.open_dataset(other), "forced")


def test_copy_back_and_publish_from_the_copy(env, folder, tmp_path):
    store = make_store(folder, tmp_path / "store")
    url = env.url("copy")
    push_store(store, url, progress=False)
    copy = pull_store(url, tmp_path / "copy", progress=False)
    assert_same_batches(lerobot_zarr.open_dataset(copy), lerobot_zarr.open_dataset(store), "copied")
    add_episode(copy, 1, "from the copy")
    assert push_store(copy, url, progress=False).committed  # the copy builds on the bucket's commit
    assert lerobot_zarr.open_dataset(url).meta.total_episodes == 9


def test_a_writer_holding_the_store_and_a_live_publisher_are_respected(env, folder, tmp_path):
    store = make_store(folder, tmp_path / "store")
    url = env.url("locks")
    with lerobot_zarr.open_dataset(store, mode="r+"):
        with pytest.raises(StoreLockedError):
            push_store(store, url, progress=False)  # a writer is changing it: not published half-way
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lease = {"id": "x", "host": os.uname().nodename, "pid": sleeper.pid, "store": "elsewhere", "since": time.time()}
        env.client("locks").write(LEASE, json.dumps(lease).encode())
        with pytest.raises(CommitConflictError, match="another publication is under way"):
            push_store(store, url, progress=False)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert push_store(store, url, progress=False).committed  # its holder is gone: taken over
    assert env.client("locks").head(LEASE) is None  # released
    for hostile in (b"[" * 60_000, b'{"id": "y", "since": NaN}'):  # nested past any stack, a time that is no time
        env.client("locks").write(LEASE, hostile)
        push_store(store, url, progress=False)  # an unreadable lease is stale: taken over, then released
        assert env.client("locks").head(LEASE) is None


def test_a_lease_is_renewed_while_held_and_a_lost_one_is_left_alone(env, monkeypatch):
    """A publication longer than LEASE_SECONDS keeps its lease: renewed (every LEASE_RENEW_SECONDS) by its id and
    If-Match; once another has taken it over, it is neither renewed nor deleted."""
    bucket = env.client("renew")
    monkeypatch.setattr(sync, "LEASE_RENEW_SECONDS", 0.01)

    def held() -> dict:
        return json.loads(bucket.read_whole(LEASE, limit=1 << 16)[0])

    with _Lease(bucket, "a store") as lease:
        first = held()
        deadline = time.monotonic() + 60  # (only a bound: the renewal thread writes every 10 ms)
        while (doc := held())["renewed"] == first["renewed"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert doc["id"] == first["id"] and doc["since"] == first["since"] and doc["renewed"] > first["renewed"]
        bucket.write(LEASE, json.dumps({"id": "other", "since": time.time()}).encode())  # taken over
        with pytest.raises(CommitConflictError):
            lease.renew()
        lease._renewer.join(60)
        assert not lease._renewer.is_alive() and held()["id"] == "other"
    assert held()["id"] == "other"
    now = time.time()
    assert not _Lease._stale({"since": now - 2 * LEASE_SECONDS, "renewed": now})
    assert _Lease._stale({"since": now - 2 * LEASE_SECONDS})


def _run_push(store: Path, url: str, env_vars: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PUSH, str(store), url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**env_vars, "PYTHONPATH": str(REPO)})


def test_a_killed_publication_leaves_the_last_commit_and_the_next_completes_it(env, folder, tmp_path):
    """SIGKILL after a random number of uploaded files (0 to all): the bucket reads as its previous commit, exactly;
    a later run uploads what is missing and commits (benchmarks/bench_object_store.py kills 20 times)."""
    store = make_store(folder, tmp_path / "store")
    url = env.url("killed")
    push_store(store, url, progress=False)
    before = snapshot(store, tmp_path / "before")
    for e in (1, 3, 5):
        add_episode(store, e, f"new {e}")
    env.server.network = NetworkModel(latency_s=0.01)
    completed, sent = False, set()
    for attempt, stop_after in enumerate((0, 3, 8)):
        proc = _run_push(store, url, dict(os.environ))
        seen = 0
        while seen < stop_after:
            line = proc.stdout.readline().strip()
            if not line or line == "DONE":
                completed = line == "DONE"
                break
            sent.add(line)
            seen += 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        remote = lerobot_zarr.open_dataset(url)
        if completed:  # nothing was left to upload when it was killed: the commit is whole
            assert remote.meta.total_episodes == 11
            break
        assert remote.meta.total_episodes == 8, f"attempt {attempt}: a half-published commit is visible"
        assert_same_batches(remote, lerobot_zarr.open_dataset(before), f"after kill {attempt} at {stop_after}")
    report = push_store(store, url, progress=False)  # the lease of the killed process is taken over
    assert completed or report.committed
    assert sent and not sent & set(report.uploaded), "files uploaded before the kills were sent again"
    assert_same_batches(lerobot_zarr.open_dataset(url), lerobot_zarr.open_dataset(store), "completed")


def test_two_publishers_never_lose_a_commit(env, folder, tmp_path):
    base = make_store(folder, tmp_path / "base")
    url = env.url("race")
    push_store(base, url, progress=False)
    stores = []
    for name, e in (("a", 2), ("b", 6)):
        shutil.copytree(base, tmp_path / name, ignore=shutil.ignore_patterns(".lock"))
        add_episode(tmp_path / name, e, f"from {name}")
        stores.append(tmp_path / name)
    env.server.network = NetworkModel(latency_s=0.01)
    procs = [_run_push(s, url, dict(os.environ)) for s in stores]
    results = [p.communicate(timeout=120) for p in procs]
    ok = [p.returncode == 0 for p in procs]
    assert sum(ok) >= 1, results
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0 or "CommitConflictError" in err, err[-2000:]
    winner = stores[ok.index(True)]
    if all(ok):  # one after the other: the second built on the first's commit only if it was its own
        pytest.fail("both publications succeeded from the same base: the second replaced the first's commit")
    remote = lerobot_zarr.open_dataset(url)
    assert_same_batches(remote, lerobot_zarr.open_dataset(winner), "the winner's commit, whole")


def test_the_command_line_takes_bucket_urls(env, folder, tmp_path, capsys):
    from lerobot_zarr.cli import main

    store = make_store(folder, tmp_path / "store")
    url = env.url("cli")
    assert main(["sync", str(store), url, "--no-progress"]) == 0
    assert "published" in capsys.readouterr().out
    assert main(["sync", str(store), url, "--no-progress"]) == 0
    assert "nothing uploaded" in capsys.readouterr().out
    assert main(["info", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total_episodes"] == 8
    assert main(["convert", url, "--root", str(tmp_path / "copy")]) == 0  # a store in a bucket, copied here
    capsys.readouterr()
    assert_same_batches(lerobot_zarr.open_dataset(tmp_path / "copy"), lerobot_zarr.open_dataset(store), "copy")
    assert main(["verify", url]) == 1
    assert "copy it first" in capsys.readouterr().err
    env.upload(folder, "lerobot")  # a LeRobot folder in the bucket: converted into the cache
    assert main(["convert", env.url("lerobot"), "--episodes", "0,2"]) == 0
    capsys.readouterr()
    assert main(["cache", "ls"]) == 0
    assert env.url("lerobot") in capsys.readouterr().out


def _delete_episode(store: Path, episode: int) -> None:
    with lerobot_zarr.open_dataset(store, mode="r+") as w:
        w.delete_episodes([episode])


def test_retired_packs_are_deleted_two_commits_later_and_readers_of_the_last_read_on(env, folder, tmp_path):
    """A commit that retires packs keeps them in the bucket for readers of the commit it replaced (one open during
    the publication reads on, exactly); the next commit deletes them; a reader of that older commit gets a typed
    error for a deleted object, and opens the bucket again."""
    store = make_store(folder, tmp_path / "store")
    url = env.url("retire")
    push_store(store, url, progress=False)
    first = snapshot(store, tmp_path / "first")
    reader = lerobot_zarr.open_dataset(url)  # commit 1, nothing of it fetched yet
    objects = set(env.client("retire").list())
    _delete_episode(store, 0)  # retires the packs that held episode 0
    report = push_store(store, url, progress=False)
    assert report.committed and report.deleted == []  # commit 1's packs stay: readers of it read on
    retired = objects - set(env.client("retire").list()) - {sync.MANIFEST}
    assert retired == set()
    assert_same_batches(reader, lerobot_zarr.open_dataset(first), "a reader of the replaced commit")
    late = pickle.dumps(reader)  # another reader of commit 1, which will have fetched nothing when it reads
    reader._remote.close()
    reader2 = lerobot_zarr.open_dataset(url)  # commit 2
    _delete_episode(store, 1)
    report = push_store(store, url, progress=False)
    assert report.committed and report.deleted
    listing = set(env.client("retire").list())
    assert not set(report.deleted) & listing
    second_files = set(sync._store_files(store)) | {"zarr.json", sync.MANIFEST}
    commit1_only = objects - second_files - set(report.deleted)
    assert all(f in listing for f in commit1_only)  # (the files commit 2 still refers to are all there)
    got = reader2.get_batch(np.arange(len(reader2)))  # every object of commit 2 is there: all its rows read
    assert len(got[CAM]) == len(reader2)
    deleted_pack = next(rel for rel in report.deleted if rel.startswith(CAM + "/c/"))
    assert deleted_pack  # a pack of episode 0, retired by commit 2, gone at commit 3
    reader = pickle.loads(late)
    with pytest.raises(lerobot_zarr.errors.SourceNotFoundError):
        reader.get_batch(np.arange(len(reader)))  # commit 1's episode 0: its pack is gone
    assert_same_batches(lerobot_zarr.open_dataset(url), lerobot_zarr.open_dataset(store), "opened again: commit 3")
    assert push_store(store, url, progress=False).deleted == []  # nothing more to delete


def test_nothing_is_deleted_when_the_commit_replaced_is_unknown(env, folder, tmp_path):
    """A bucket whose manifest is damaged (or whose commit came from elsewhere): nothing is deleted."""
    store = make_store(folder, tmp_path / "store")
    url = env.url("unknown")
    push_store(store, url, progress=False)
    env.client("unknown").write(sync.MANIFEST, b"[[[not a manifest")
    _delete_episode(store, 0)
    push_store(store, url, progress=False)
    before = set(env.client("unknown").list())
    _delete_episode(store, 1)
    report = push_store(store, url, progress=False)
    assert report.committed and report.deleted == [] and before <= set(env.client("unknown").list())


def test_the_records_of_hard_linked_mp4_files_are_not_published(env, tmp_path):
    """A store kept its camera as the local source's mp4 files (hard links, each with its ``.<file>.linked``
    record of this machine's inode, size and time): the records are not published (nor copied back from a bucket
    that holds some); the mp4 files are, and the bucket's store and a copy of it serve the same frames."""
    pytest.importorskip("av", reason="writing mp4 files needs PyAV")
    src = write_sample_dataset(tmp_path / "src", n_episodes=3, lengths=(6, 9), video_keys=(CAM,), write_videos=True,
                               image_shape=(16, 16, 3), seed=3)
    store = lerobot_zarr.open_dataset(src, root=tmp_path / "store", storage={CAM: "mp4"}, progress=False).root
    records = [p for p in Path(store).rglob(".*.linked")]
    assert records, "the store should hold hard links (same filesystem as its source)"
    url = env.url("linked")
    report = push_store(store, url, progress=False)
    listed = env.client("linked").list()
    assert not [rel for rel in listed if rel.endswith(".linked")], sorted(listed)
    assert not [rel for rel in report.uploaded if rel.endswith(".linked")]
    assert any(rel.endswith(".mp4") for rel in listed)
    assert_same_batches(lerobot_zarr.open_dataset(url), lerobot_zarr.open_dataset(store), "published mp4 camera")
    stray = records[0].relative_to(store).as_posix()  # (what an older version published)
    env.client("linked").write(stray, records[0].read_bytes())
    copy = pull_store(url, tmp_path / "copy", progress=False)
    assert not list(copy.rglob(".*.linked"))
    assert_same_batches(lerobot_zarr.open_dataset(copy), lerobot_zarr.open_dataset(store), "copied mp4 camera")
