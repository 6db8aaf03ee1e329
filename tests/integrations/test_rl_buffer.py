"""``lerobot_zarr.integrations.rl.ReplayBuffer`` (issue 24), checked against LeRobot 0.6.1's own ``lerobot.rl.buffer.ReplayBuffer``
where lerobot is installed (those tests skip otherwise; the whole file skips without torch).

The same transitions added to both give batches of the same layout (keys, shapes, dtypes, devices, with and
without cameras, DrQ and complementary_info); every transition either samples is the reference transition its
state names (``rl_reference``: ours bit for bit, episode ends included); DrQ's ``random_shift`` draws what
LeRobot's draws; ``OnlineOfflineMixer`` takes ours on either side; ``from_lerobot_dataset`` and
``to_lerobot_dataset`` agree with LeRobot's on datasets LeRobot wrote; a buffer is published to (and read back
from) the test Hub; a SIGKILLed actor process loses nothing committed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch replay buffer is not tested here")

import rl_reference as ref  # noqa: E402
from hub_fixtures import running_server, server_env  # noqa: E402
from rl_reference import CAMERA, STATE, as_numpy, check_batch, transitions  # noqa: E402

import lerobot_zarr  # noqa: E402
from lerobot_zarr import ArgumentError, EmptyBufferError, ReadOnlyStoreError  # noqa: E402
from lerobot_zarr.integrations.rl import ReplayBuffer, random_shift  # noqa: E402
from lerobot_zarr.testing.hub_server import HubServer  # noqa: E402

SEED = 11
TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
TOKEN = "hf_write"


def shift(images):
    return random_shift(images, 4)


def lerobot_buffer(**kwargs):
    pytest.importorskip("lerobot", reason="lerobot is not installed: LeRobot's own ReplayBuffer is not compared")
    from lerobot.rl.buffer import ReplayBuffer as LeRobotReplayBuffer

    return LeRobotReplayBuffer(**kwargs)


def fill(*buffers, episodes=range(8), seed=SEED, **kwargs) -> list[tuple[int, int]]:
    ids = []
    for e in episodes:
        for t, tr in enumerate(transitions(seed, e, **kwargs)):
            for b in buffers:
                b.add(**{k: _tensors(v) for k, v in tr.items()})
            ids.append((e, t))
    return ids


def _tensors(value):
    if isinstance(value, dict):
        return {k: _tensors(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    return value


def layout(batch):
    if isinstance(batch, dict):
        return {k: layout(v) for k, v in batch.items()}
    if isinstance(batch, torch.Tensor):
        return tuple(batch.shape), batch.dtype, batch.device.type, batch.is_contiguous()
    return batch


@pytest.mark.parametrize("camera", [True, False], ids=["camera", "no camera"])
@pytest.mark.parametrize("use_drq", [True, False], ids=["drq", "no drq"])
def test_batches_have_lerobots_layout(tmp_path, camera, use_drq):
    theirs = lerobot_buffer(capacity=1000, device="cpu", use_drq=use_drq, image_augmentation_function=shift)
    ours = ReplayBuffer(1000, device="cpu", use_drq=use_drq, image_augmentation_function=shift, root=tmp_path / "b")
    fill(ours, theirs, camera=camera)
    assert len(ours) == len(theirs)
    a, b = ours.sample(64), theirs.sample(64)
    assert layout(a) == layout(b), "keys, shapes, dtypes, devices and contiguity"
    assert ours.sample(10**6)["reward"].shape == theirs.sample(10**6)["reward"].shape == (len(ours),)


def test_batches_without_complementary_info_have_none_as_lerobot(tmp_path):
    theirs = lerobot_buffer(capacity=100, device="cpu", use_drq=False)
    ours = ReplayBuffer(100, device="cpu", use_drq=False, root=tmp_path / "b")
    for b in (ours, theirs):
        for t in range(5):
            b.add({STATE: torch.full((1, 3), float(t))}, torch.zeros(1, 2), 1.0, {STATE: torch.full((1, 3), t + 1.0)},
                  t == 4, False)
    assert ours.sample(4)["complementary_info"] is None and theirs.sample(4)["complementary_info"] is None
    assert layout(ours.sample(4)) == layout(theirs.sample(4))


def test_every_sampled_transition_is_one_that_was_added(tmp_path):
    """Ours exactly (cameras included, episode ends' final observations included); LeRobot's own buffer gives the
    same reference transitions (it keeps next_state whole without optimize_memory), which checks the reference."""
    ours = ReplayBuffer(500, device="cpu", use_drq=False, root=tmp_path / "b")
    ids = fill(ours, episodes=range(20))
    drawn = set()
    for _ in range(30):
        drawn |= set(check_batch(ours.sample(128), SEED))
    assert drawn == set(ids), "every transition is drawn, and only those"
    try:
        theirs = lerobot_buffer(capacity=500, device="cpu", use_drq=False)
    except pytest.skip.Exception:
        return
    fill(theirs, episodes=range(20))
    check_batch(theirs.sample(256), SEED)


def test_capacity_keeps_the_newest_whole_episodes_and_a_reopened_buffer_samples_alike(tmp_path):
    """LeRobot's ring keeps the newest ``capacity`` transitions; ours the newest whole episodes among them."""
    theirs = lerobot_buffer(capacity=30, device="cpu", use_drq=False)
    ours = ReplayBuffer(30, device="cpu", use_drq=False, root=tmp_path / "b")
    ids = fill(ours, theirs, episodes=range(20))
    assert len(theirs) == 30 and 30 - 8 < len(ours) <= 30
    kept = check_batch(ours._buffer.gather(np.arange(len(ours))), SEED)
    assert kept == ids[-len(kept):] and kept[0][1] == 0, "the newest transitions, whole episodes"
    held_by_lerobot = {(int(s[0]), int(s[1])) for s in theirs.states[STATE].numpy()}
    assert set(kept) <= held_by_lerobot == set(ids[-30:])
    ours.close()
    reopened = ReplayBuffer(30, device="cpu", use_drq=False, root=tmp_path / "b")
    assert len(reopened) == len(kept)
    assert layout(reopened.sample(16)) == layout(theirs.sample(16))
    check_batch(reopened.sample(64), SEED)
    reopened.close()


def test_drq_augments_cameras_of_state_and_next_state_as_lerobot(tmp_path):
    flip = lambda x: x.flip(-1)  # noqa: E731  (deterministic: the values show which frames were augmented)
    ours = ReplayBuffer(100, device="cpu", image_augmentation_function=flip, root=tmp_path / "b")
    fill(ours, episodes=range(6))
    batch = as_numpy(ours.sample(64))
    for i in range(len(batch["reward"])):
        e, t = int(batch["state"][STATE][i, 0]), int(batch["state"][STATE][i, 1])
        r = ref.expected(SEED, e, t)
        assert np.array_equal(batch["state"][CAMERA][i], r["state"][CAMERA][..., ::-1])
        assert np.array_equal(batch["next_state"][CAMERA][i], r["next_state"][CAMERA][..., ::-1])
    check_batch(batch, SEED, cameras=False)
    default = ReplayBuffer(10, device="cpu", root=tmp_path / "d")
    assert default.image_augmentation_function is not None and default.use_drq


def test_random_shift_draws_what_lerobots_draws():
    images = torch.rand(16, 3, 12, 10)
    torch.manual_seed(0)
    ours = random_shift(images, 4)
    assert ours.shape == images.shape
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4), mode="replicate")
    for i in range(16):  # each output is a crop of its padded input
        assert any(torch.equal(ours[i], padded[i, :, y:y + 12, x:x + 10]) for y in range(9) for x in range(9))
    pytest.importorskip("lerobot", reason="lerobot is not installed: LeRobot's random_shift is not compared")
    from lerobot.rl.buffer import random_shift as lerobot_random_shift

    torch.manual_seed(0)
    assert torch.equal(ours, lerobot_random_shift(images, 4))


def test_online_offline_mixer_takes_ours_on_either_side(tmp_path):
    pytest.importorskip("lerobot", reason="lerobot is not installed: OnlineOfflineMixer is not tested")
    from lerobot.rl.data_sources import OnlineOfflineMixer

    options = dict(device="cpu", use_drq=False)
    ours = ReplayBuffer(1000, **options, root=tmp_path / "online")
    ours_offline = ReplayBuffer(1000, **options, root=tmp_path / "offline")
    theirs = lerobot_buffer(capacity=1000, **options)
    fill(ours, theirs, episodes=range(10))
    fill(ours_offline, episodes=range(10, 20))
    for online, offline in ((ours, theirs), (theirs, ours), (ours, ours_offline), (ours, None)):
        mixer = OnlineOfflineMixer(online, offline, online_ratio=0.5)
        batch = mixer.sample(32)
        assert len(batch["reward"]) == 32 and batch["state"][CAMERA].shape == (32, *ref.IMAGE)
        check_batch(batch, SEED)
        it = mixer.get_iterator(16, async_prefetch=True)
        for _ in range(3):
            check_batch(next(it), SEED)
        it.close()


def test_get_iterator_prefetches_batches_and_raises_sampling_errors(tmp_path):
    buf = ReplayBuffer(100, device="cpu", use_drq=False, root=tmp_path / "b")
    with pytest.raises(EmptyBufferError) as err:
        next(buf.get_iterator(8, async_prefetch=True))
    assert isinstance(err.value, RuntimeError), "as LeRobot: sampling an empty buffer is a RuntimeError"
    with pytest.raises(RuntimeError, match="empty buffer"):
        buf.sample(4)
    fill(buf, episodes=range(3))
    for async_prefetch in (True, False):
        it = buf.get_iterator(8, async_prefetch=async_prefetch, queue_size=3)
        for _ in range(5):
            check_batch(next(it), SEED)
        it.close()
    with pytest.raises(ArgumentError, match="batch_size"):
        buf.sample(0)
    with pytest.raises(ArgumentError, match="capacity"):
        ReplayBuffer(0, root=tmp_path / "c")


def _lerobot_written_dataset(tmp_path: Path, **kwargs):
    """An RL dataset as LeRobot's learner saves its buffer: LeRobot's to_lerobot_dataset of LeRobot's buffer."""
    theirs = lerobot_buffer(capacity=1000, device="cpu", use_drq=False)
    ids = fill(theirs, episodes=range(6), **kwargs)
    ds = theirs.to_lerobot_dataset("local/rl", fps=10, root=tmp_path / "lerobot_ds")
    return ds, ids


def _lerobot_contents(buf) -> dict:
    """Every transition held by LeRobot's buffer, in order (its storage tensors)."""
    n = len(buf)
    return {"state": {k: v[:n].numpy() for k, v in buf.states.items()},
            "next_state": {k: v[:n].numpy() for k, v in buf.next_states.items()},
            "action": buf.actions[:n].numpy(), "reward": buf.rewards[:n].numpy(), "done": buf.dones[:n].numpy(),
            "truncated": buf.truncateds[:n].numpy(),
            "complementary_info": {k: v[:n].numpy() for k, v in buf.complementary_info.items()}}


def _ours_contents(buf: ReplayBuffer) -> dict:
    return buf._buffer.gather(np.arange(len(buf)))


def assert_same(a: dict, b: dict, where: str) -> None:
    for key in ("action", "reward", "done", "truncated"):
        assert np.array_equal(np.asarray(a[key], np.float32), np.asarray(b[key], np.float32)), f"{where}: {key}"
    for part in ("state", "next_state", "complementary_info"):
        assert set(a[part]) == set(b[part]), f"{where}: {part} keys {sorted(a[part])} != {sorted(b[part])}"
        for k in a[part]:
            assert a[part][k].shape == b[part][k].shape, f"{where}: {part}[{k}] shape"
            assert np.array_equal(a[part][k], b[part][k]), f"{where}: {part}[{k}] values"


def test_from_lerobot_dataset_gives_lerobots_transitions(tmp_path):
    from lerobot.rl.buffer import ReplayBuffer as LeRobotReplayBuffer

    ds, ids = _lerobot_written_dataset(tmp_path)
    keys = [STATE, CAMERA]
    theirs = LeRobotReplayBuffer.from_lerobot_dataset(ds, device="cpu", state_keys=keys, use_drq=False)
    want = _lerobot_contents(theirs)
    view = ReplayBuffer.from_lerobot_dataset(ds, device="cpu", state_keys=keys, use_drq=False)
    assert len(view) == len(theirs) == len(ids)
    assert_same(_ours_contents(view), want, "read in place")
    with pytest.raises(ReadOnlyStoreError, match="pass root="):
        view.add(**{k: _tensors(v) for k, v in transitions(SEED, 0)[0].items()})
    copy = ReplayBuffer.from_lerobot_dataset(ds, device="cpu", state_keys=keys, use_drq=False, root=tmp_path / "c",
                                             progress=False, capacity=1000)
    assert_same(_ours_contents(copy), want, "copied")
    fill(copy, episodes=[50])  # the copy takes adds (LeRobot's learner adds interventions to its offline buffer)
    assert len(copy) == len(ids) + ref.episode(SEED, 50)["length"]
    assert layout(copy.sample(8)) == layout(theirs.sample(8))
    with pytest.raises(ArgumentError, match="capacity"):
        ReplayBuffer.from_lerobot_dataset(ds, device="cpu", state_keys=keys, capacity=3)


def test_to_lerobot_dataset_is_read_back_by_lerobot(tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.rl.buffer import ReplayBuffer as LeRobotReplayBuffer

    ours = ReplayBuffer(1000, device="cpu", use_drq=False, root=tmp_path / "b", fps=10)
    theirs = lerobot_buffer(capacity=1000, device="cpu", use_drq=False)
    fill(ours, theirs, episodes=range(6))
    mine = ours.to_lerobot_dataset("local/ours", fps=10, root=tmp_path / "ours_ds")
    lerobots = theirs.to_lerobot_dataset("local/theirs", fps=10, root=tmp_path / "theirs_ds")
    assert isinstance(mine, LeRobotDataset) and len(mine) == len(lerobots) == len(ours)
    keys = [STATE, CAMERA]
    a = LeRobotReplayBuffer.from_lerobot_dataset(mine, device="cpu", state_keys=keys, use_drq=False)
    b = LeRobotReplayBuffer.from_lerobot_dataset(lerobots, device="cpu", state_keys=keys, use_drq=False)
    assert_same(_lerobot_contents(a), _lerobot_contents(b), "LeRobot reading our export vs its own")
    assert mine.meta.total_episodes == lerobots.meta.total_episodes == 6


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    yield from running_server(HubServer(tmp_path_factory.mktemp("rl_hub") / "storage", tokens={TOKEN: "alice"}))


@pytest.fixture
def env(monkeypatch, tmp_path, hub):
    yield from server_env(monkeypatch, tmp_path, hub)


def test_push_publishes_the_buffer_and_a_hub_dataset_is_an_offline_buffer(tmp_path, hub, env):
    ours = ReplayBuffer(1000, device="cpu", use_drq=False, root=tmp_path / "b", fps=10)
    ids = fill(ours, episodes=range(6))
    part = transitions(SEED, 6)
    for tr in part[:-1]:
        ours.add(**{k: _tensors(v) for k, v in tr.items()})
    sha = ours.push("alice/rl-buffer", token=TOKEN, progress=False)
    assert sha and hub.refs("alice/rl-buffer")["tags"].get("v3.0") == sha
    published = lerobot_zarr.open_dataset("alice/rl-buffer", token=TOKEN, root=tmp_path / "published", progress=False)
    assert published.meta.total_frames == len(ids) + len(part) - 1, "the episode in progress is published too"
    frames = published.get_batch(np.arange(len(published)))
    assert np.array_equal(frames["next.truncated"], ours.dataset.get_batch(np.arange(len(published)))["next.truncated"])
    # an offline buffer from the Hub reads the episodes asked for only
    offline = ReplayBuffer.from_lerobot_dataset("alice/rl-buffer", device="cpu", state_keys=[STATE, CAMERA],
                                                use_drq=False, episodes=[1, 2], token=TOKEN)
    lengths = [ref.episode(SEED, e)["length"] for e in (1, 2)]
    assert len(offline) == sum(lengths)
    got = as_numpy(offline._buffer.gather(np.arange(len(offline))))
    for i, (e, t) in enumerate([(k, t) for k in (1, 2) for t in range(ref.episode(SEED, k)["length"])]):
        r = ref.expected(SEED, e, t)
        last = t == ref.episode(SEED, e)["length"] - 1
        assert np.array_equal(got["state"][STATE][i], r["state"][STATE])
        assert np.array_equal(got["next_state"][STATE][i], r["state" if last else "next_state"][STATE]), \
            "a dataset has no final observations: LeRobot's rule"
        assert got["reward"][i] == r["reward"] and got["truncated"][i] == r["truncated"]


_ACTOR = """
import sys
sys.path.insert(0, {tests!r})
import torch
from rl_reference import transitions
from lerobot_zarr.integrations.rl import ReplayBuffer
buf = ReplayBuffer(10**6, device="cpu", root={root!r}, use_drq=False)
added = 0
for e in range(10**6):
    for tr in transitions({seed!r}, e):
        tr = {{k: ({{kk: torch.from_numpy(vv) for kk, vv in v.items()}} if k in ("state", "next_state")
              else torch.from_numpy(v) if hasattr(v, "dtype") else v) for k, v in tr.items()}}
        buf.add(**tr)
        added += 1
        if added % 3 == 0:
            buf.checkpoint()
            print("C", added, flush=True)
"""


def test_an_actor_process_killed_loses_nothing_committed_and_a_learner_samples_it(tmp_path):
    root = tmp_path / "buf"
    proc = subprocess.Popen([sys.executable, "-c", _ACTOR.format(tests=str(TESTS), root=str(root), seed=SEED)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    first = proc.stdout.readline()
    assert first.startswith("C"), proc.stderr.read()
    learner = ReplayBuffer(10**6, device="cpu", use_drq=False, root=root, mode="r", refresh_interval=0.0)
    seen = 0
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        seen += len(check_batch(learner.sample(32), SEED))
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    reported = ref.reported_commits(first, out)[-1]
    reopened = ReplayBuffer(10**6, device="cpu", use_drq=False, root=root)
    assert len(reopened) >= reported and seen > 0
    ids = check_batch(reopened._buffer.gather(np.arange(len(reopened))), SEED)
    assert ids[0] == (0, 0), "nothing lost at the start"
    assert all(b in ((a[0], a[1] + 1), (a[0] + 1, 0)) for a, b in zip(ids, ids[1:], strict=False)), "nor in between"
    reopened.close()


def test_the_actor_learner_example_runs(tmp_path):
    """examples/rl_actor_learner.py: an actor process adds while a learner process samples the same folder."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "LEROBOT_ZARR_HOME": str(tmp_path / "cache"),
           "HF_LEROBOT_HOME": str(tmp_path / "lerobot_home")}
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "rl_actor_learner.py"), "--root",
                           str(tmp_path / "buffer"), "--steps", "200", "--learn-seconds", "1"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(":", 1) for line in proc.stdout.splitlines() if ":" in line)
    assert {"actor", "learner", "reopened", "written as a LeRobot dataset"} <= set(lines), proc.stdout
    added = int(lines["actor"].split()[0])
    assert f" {added} transitions" in lines["reopened"], "everything the actor added is in the reopened buffer"


def test_a_buffer_does_not_pickle_and_says_how_to_share_it(tmp_path):
    import pickle

    buf = ReplayBuffer(10, device="cpu", root=tmp_path / "b")
    with pytest.raises(TypeError, match="mode='r'"):
        pickle.dumps(buf)
    buf.close()


def _float_images(seed: int, n: int, high: float = 1.0) -> list[dict]:
    """``n`` transitions of one episode with camera frames LeRobot's test makes (``torch.rand``: not multiples of
    1/255), scaled to ``[0, high)``."""
    g = torch.Generator().manual_seed(seed)
    frames = [torch.rand(3, 12, 10, generator=g) * high for _ in range(n + 1)]
    return [dict(state={CAMERA: frames[t][None], STATE: torch.full((1, 4), float(t))}, action=torch.zeros(1, 2),
                 reward=float(t), next_state={CAMERA: frames[t + 1][None], STATE: torch.full((1, 4), t + 1.0)},
                 done=t == n - 1, truncated=False) for t in range(n)]


def test_cameras_are_kept_exactly_as_lerobots_buffer_keeps_them(tmp_path):
    """A new buffer keeps any float camera values (above 1 too) exactly, as LeRobot's; a buffer made with
    ``image_storage="uint8"`` keeps that storage when reopened without the argument."""
    added = _float_images(3, 6, high=2.0)
    ours = ReplayBuffer(100, device="cpu", use_drq=False, root=tmp_path / "b")
    for tr in added:
        ours.add(**tr)
    by_state = {int(tr["state"][STATE][0, 0]): tr for tr in added}
    batch = ours.sample(64)
    assert len(batch["reward"]) == 6
    for i in range(6):
        tr = by_state[int(batch["state"][STATE][i, 0])]
        assert torch.equal(batch["state"][CAMERA][i], tr["state"][CAMERA][0])
        assert torch.equal(batch["next_state"][CAMERA][i], tr["next_state"][CAMERA][0])
    ours.close()
    small = ReplayBuffer(100, device="cpu", use_drq=False, root=tmp_path / "u8", image_storage="uint8")
    fill(small, episodes=range(2))
    small.close()
    reopened = ReplayBuffer(100, device="cpu", use_drq=False, root=tmp_path / "u8")
    check_batch(reopened.sample(32), SEED)
    assert reopened.dataset.meta.features[CAMERA]["dtype"] == "image"
    reopened.close()


def test_to_lerobot_dataset_publishes_float_cameras_as_lerobots_does(tmp_path):
    """The same float transitions through LeRobot's buffer and ours: LeRobot loads both exports with the same
    features and the same pixels (LeRobot's truncation of ``v * 255``, not a rounding)."""
    from lerobot.rl.buffer import ReplayBuffer as LeRobotReplayBuffer  # noqa: F401  (skips without lerobot)

    theirs = lerobot_buffer(capacity=100, device="cpu", use_drq=False)
    ours = ReplayBuffer(100, device="cpu", use_drq=False, root=tmp_path / "b")
    for tr in _float_images(5, 7):
        theirs.add(**tr)
        ours.add(**tr)
    mine = ours.to_lerobot_dataset("local/ours", root=tmp_path / "ours_ds")
    lerobots = theirs.to_lerobot_dataset("local/theirs", root=tmp_path / "theirs_ds")
    for key in (CAMERA, STATE, "action", "next.reward", "next.done"):
        want = lerobots.meta.features[key]
        assert {k: mine.meta.features[key][k] for k in ("dtype", "shape")} == {"dtype": want["dtype"],
                                                                                "shape": want["shape"]}, key
    assert tuple(mine.meta.features[CAMERA]["shape"]) == (3, 12, 10)
    assert len(mine) == len(lerobots) == 7
    for i in range(7):
        a, b = mine[i], lerobots[i]
        assert a[CAMERA].dtype == b[CAMERA].dtype and torch.equal(a[CAMERA], b[CAMERA]), i
        assert torch.equal(a[STATE], b[STATE]) and torch.equal(a["next.reward"], b["next.reward"])


def test_float_camera_stats_are_lerobots_computed_when_asked(tmp_path):
    """The drop-in's float32 camera (its default): ``dataset.meta.stats``, computed when asked rather than at each
    commit, are those LeRobot 0.6.1 publishes for its own buffer's camera (``to_lerobot_dataset``: an ``image``
    feature, per-channel stats of shape (3, 1, 1) of its PNG pixels; LeRobot's ``aggregate_stats`` takes no other
    shape for a key naming an image), and ``to_lerobot_dataset`` publishes the same. Quantiles are left out:
    LeRobot's come from histograms."""
    pytest.importorskip("lerobot", reason="lerobot is not installed: LeRobot's stats are not compared")

    theirs = lerobot_buffer(capacity=100, device="cpu", use_drq=False)
    ours = ReplayBuffer(100, device="cpu", use_drq=False, root=tmp_path / "b")
    episodes = [_float_images(20 + e, 4 + e) for e in range(3)]
    for ep in episodes:
        for tr in ep:
            theirs.add(**tr)
            ours.add(**tr)
    got = ours.dataset.meta.stats[CAMERA]
    lerobot_ds = theirs.to_lerobot_dataset("local/theirs", root=tmp_path / "theirs_ds")
    assert lerobot_ds.meta.features[CAMERA]["dtype"] == "image"
    lerobots = lerobot_ds.meta.stats[CAMERA]
    mine = ours.to_lerobot_dataset("local/ours", root=tmp_path / "ours_ds").meta.stats[CAMERA]
    for name in ("min", "max", "mean", "std", "count"):
        shape = (1,) if name == "count" else (3, 1, 1)
        assert np.shape(got[name]) == np.shape(mine[name]) == np.shape(lerobots[name]) == shape, name
        assert np.allclose(got[name], lerobots[name], rtol=1e-6, atol=1e-7), name
        assert np.allclose(mine[name], lerobots[name], rtol=1e-6, atol=1e-7), name
    ours.close()


def test_to_lerobot_dataset_refuses_camera_values_lerobots_images_cannot_hold(tmp_path):
    from lerobot_zarr import ValueRangeError

    ours = ReplayBuffer(100, device="cpu", use_drq=False, root=tmp_path / "b")
    for tr in _float_images(4, 3, high=2.0):
        ours.add(**tr)
    with pytest.raises(ValueRangeError, match=r"observation\.images\.front.*\[0\.0, 1\.0\]"):
        ours.to_lerobot_dataset("local/ours", root=tmp_path / "ours_ds")
    assert len(ours) == 3, "the buffer keeps them"
