"""Waiting on the network never holds a store's writer lock (issue 13, item 1).

Two real processes open episodes of the same Hub repo into the same (cached) store. The data file of the first
one's episode stalls on the test Hub: while it waits, the store's writer lock is free, and the second process,
asking for an episode of another data file, fetches and commits it exactly while the first still waits on its
first attempt (the timeouts are long: only the test ends the stall, so the order of events proves it, not a
clock). Once the stall is released the first ends in a ``HubError`` naming the file after its bounded retries,
and the store stays readable, holding the second one's episode; the stalled episode is fetched once the Hub
answers again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hub_fixtures import assert_same_frames, lib_requests, make_env, resolve_prefix, running_server

import lerobot_zarr.hub.http as hub_module
from lerobot_zarr import LeRobotZarrDataset, open_dataset
from lerobot_zarr.store.state import has_commit_point, read_state
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset
from lerobot_zarr.utils.fileio import WriterLock

REPO = "org/three-files"
TIMEOUT = 300  # seconds (huggingface_hub parses these variables as integers): no read is given up during the test
STALLED = "data/chunk-000/file-001.parquet"  # episodes 2 and 3
MAIN = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, time
import lerobot_zarr.hub.http as hub_module
from lerobot_zarr import LeRobotZarrDataset, open_dataset

hub_module._BACKOFF_S = 0.05  # retries back off briefly: the read timeout bounds each attempt
episodes = json.loads(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()  # "go"
t0 = time.monotonic()
try:
    ds = open_dataset("@REPO@", episodes=episodes, progress=False)
    out = {"ok": True, "root": str(ds.root), "episodes": ds.episodes.tolist(), "len": len(ds)}
except Exception as exc:
    out = {"ok": False, "type": type(exc).__name__, "module": type(exc).__module__, "message": str(exc),
           "path": getattr(exc, "path", None)}
out["elapsed"] = time.monotonic() - t0
print(json.dumps(out), flush=True)
""".replace("@REPO@", REPO)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    base = tmp_path_factory.mktemp("hub_lock")
    # 3 data files of 2 episodes, each over the 16 KiB tail read for a footer: row groups are range reads
    src = write_sample_dataset(base / "src", n_episodes=6, lengths=(60, 80), episodes_per_file=2, state_dim=64,
                               action_dim=64, seed=13)
    server = HubServer(base / "storage")
    server.src = src
    server.sha = server.add_repo(REPO, src, tags=["v3.0"])
    yield from running_server(server)


@pytest.fixture
def env(monkeypatch, tmp_path, hub):
    env = make_env(monkeypatch, tmp_path, hub.endpoint)
    hub.clear_faults()
    hub.reset_stats()
    yield env
    hub.clear_faults()


def child_env(env) -> dict[str, str]:
    """The settings make_env gives this process, as environment variables for a child process."""
    out = {k: v for k, v in os.environ.items()
           if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "ZARR_ARRAY__RECTILINEAR_CHUNKS")}
    out.update(PYTHONPATH=str(MAIN), HF_ENDPOINT=env.endpoint, HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1",
               HF_HOME=str(env.hf_home), HF_HUB_CACHE=str(env.hf_cache), LEROBOT_ZARR_HOME=str(env.zarr_home),
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DOWNLOAD_TIMEOUT=str(TIMEOUT),
               HF_HUB_ETAG_TIMEOUT=str(TIMEOUT))
    return out


class Child:
    """A Python process that opens ``episodes`` of the repo when told to go, and reports as JSON."""

    def __init__(self, env, episodes: list[int]):
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(episodes)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(env))

    def wait_ready(self) -> None:
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", line + self.proc.stderr.read()

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def result(self, timeout: float) -> dict:
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("first", [[0, 2], [2]], ids=["stalls-after-creating-the-store", "stalls-before-any-store"])
def test_a_stalled_download_does_not_block_another_process(hub, env, tmp_path, first):
    store = env.zarr_home / "hub" / REPO.replace("/", "--") / hub.sha
    if first[0] == 0:  # the store is made (holding episode 0) before the first process asks for more of it: an
        # open fetches the footers of all its data files together before it makes a store
        open_dataset(REPO, episodes=[0], progress=False)
        hub.reset_stats()
    hub.inject_fault(path_contains=resolve_prefix(REPO, hub.sha) + STALLED, kind="stall", count=100, seconds=600)
    stalled, other = Child(env, first), Child(env, [4])  # episode 4: in data/chunk-000/file-002.parquet
    try:
        stalled.wait_ready()
        other.wait_ready()
        stalled.go()
        wait_for(lambda: lib_requests(hub, "GET", STALLED) or stalled.proc.poll() is not None, 300,
                 "the first process to reach the stalled file")
        assert stalled.proc.poll() is None, f"the first process ended before the stall: {stalled.proc.communicate()}"
        if first[0] == 0:  # the store exists while it waits on the stalled file
            assert has_commit_point(store)
        if (store / ".lock").exists():  # the lock is free while the first process waits on the network
            with WriterLock(store, blocking=False):
                pass

        other.go()
        got = other.result(timeout=300)  # a lock held across the download would keep it waiting for the release
        assert got["ok"], got
        assert got["root"] == str(store) and got["episodes"] == [4]
        assert stalled.proc.poll() is None and len(lib_requests(hub, "GET", STALLED)) == 1, \
            "the first process no longer waits on its first attempt: the test proves nothing"

        hub.release_stalls()  # the stalled answer is dropped, and each retry's at once
        failed = stalled.result(timeout=300)
    finally:
        hub.release_stalls()
        stalled.kill()
        other.kill()
    # the first one ends in a typed HubError naming the stalled file, after its bounded retries
    assert not failed["ok"] and failed["type"] == "HubError" and failed["module"] == "lerobot_zarr.errors", failed
    assert STALLED in failed["message"] and failed["path"] == STALLED, failed
    attempts = lib_requests(hub, "GET", STALLED)
    assert len(attempts) == hub_module._RETRIES + 1, [r.range for r in attempts]

    # the store is readable and holds the second process's episode, exactly; what the first committed is exact too
    local = open_dataset(hub.src, root=tmp_path / "local", progress=False)
    state = read_state(store)
    held = np.flatnonzero(state.complete_episodes()).tolist()
    assert 4 in held and 2 not in held and set(held) <= {0, 4}, held
    for e in held:
        assert_same_frames(LeRobotZarrDataset(store, episodes=[e]), LeRobotZarrDataset(local.root, episodes=[e]),
                           f"episode {e}")
    # once the Hub answers again, the stalled episode is fetched into the same store
    hub.clear_faults()
    again = open_dataset(REPO, episodes=first, progress=False)
    assert again.root == store
    assert_same_frames(again, LeRobotZarrDataset(local.root, episodes=first), "after the stall")
