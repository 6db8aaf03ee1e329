"""A mixture's batches gathered across its datasets at once (``sampling.fused``): equal, key by key, dtype by dtype,
to the per-dataset path (each dataset's own ``get_batch`` at its indices, assembled), over random batches, unions
and intersections, ``pad_to``, casts, cameras kept compressed in one dataset and raw in another, a dataset refreshed
after an append, and datasets that keep their own path."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lerobot_zarr as lz
from lerobot_zarr.errors import FrameIndexError, StoreClosedError
from lerobot_zarr.sampling.fused import GatherLayout
from lerobot_zarr.testing.sample_data import write_sample_dataset

pytestmark = pytest.mark.filterwarnings("ignore::lerobot_zarr.LeRobotZarrWarning")
FPS = 10
DELTAS = {"observation.state": [-0.2, -0.1, 0.0], "action": [k / FPS for k in range(4)]}
RENAME_B = {"observation.joint_pos": "observation.state", "act": "action"}


def make_store(path: Path, features: dict[str, tuple[str, list[int]]], lengths: list[int], *, seed: int,
               tasks: tuple[str, ...] = ("pick", "place")) -> str:
    rng = np.random.default_rng(seed)
    spec = {name: {"dtype": dtype, "shape": shape, "names": None} for name, (dtype, shape) in features.items()}
    with lz.create(path, fps=FPS, features=spec, durable=False, min_free_bytes=0) as w:
        for e, n in enumerate(lengths):
            w.add_episode({name: (rng.integers(0, 256, (n, *shape), dtype=np.uint8) if dtype == "image" else
                                  (rng.standard_normal((n, *shape)) * 10 + seed).astype(dtype))
                           for name, (dtype, shape) in features.items()}, task=tasks[e % len(tasks)])
    return str(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A (state 4, action 3, a camera, torque f32), B (joint_pos 6 -> state, act 5 -> action, a camera, gripper),
    C (state 4, action 3, torque f64: cast), D (like A, many short episodes)."""
    base = tmp_path_factory.mktemp("fused")
    return {
        "a": make_store(base / "a", {"observation.state": ("float32", [4]), "action": ("float32", [3]),
                                     "observation.images.cam": ("image", [6, 8, 3]), "torque": ("float32", [3])},
                        [7, 12, 5], seed=1),
        "b": make_store(base / "b", {"observation.joint_pos": ("float32", [6]), "act": ("float32", [5]),
                                     "observation.images.cam": ("image", [6, 8, 3]), "gripper": ("float32", [2])},
                        [9, 4], seed=2, tasks=("open the door",)),
        "c": make_store(base / "c", {"observation.state": ("float32", [4]), "action": ("float32", [3]),
                                     "torque": ("float64", [3])}, [3, 8, 6, 2], seed=3),
        "d": make_store(base / "d", {"observation.state": ("float32", [4]), "action": ("float32", [3])},
                        [1, 2, 3, 1, 5, 2], seed=4, tasks=("wipe", "stack", "pour")),
    }


def per_dataset(mix: lz.LeRobotZarrMixture, indices: np.ndarray) -> dict:
    """The batch through each dataset's own get_batch (the path a mixture takes when it cannot fuse)."""
    return mix._gather([mix.locate(indices)])[0]


def fused(mix: lz.LeRobotZarrMixture, indices: np.ndarray) -> dict:
    """``mix.get_batch(indices)``, checked to have been gathered across the datasets at once."""
    assert mix._fused.gather(indices) is not None
    return mix.get_batch(indices)


def assert_same(got: dict, want: dict) -> None:
    assert list(got) == list(want) or set(got) == set(want), set(got) ^ set(want)
    for key, value in want.items():
        if key == "task":
            assert got[key] == value
            continue
        assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
        np.testing.assert_array_equal(got[key], value, err_msg=key)


@pytest.fixture(scope="module")
def union(stores):
    s = stores
    mix = lz.open_mixture([s["a"], s["b"], s["c"], s["d"]], delta_timestamps=DELTAS, features="union",
                          rename={s["b"]: RENAME_B}, pad_to={"observation.state": 6, "action": 5})
    yield mix
    mix.close()


@pytest.fixture(scope="module")
def intersection(stores):
    s = stores
    mix = lz.open_mixture({s["a"]: 0.5, s["c"]: 0.3, s["d"]: 0.2}, delta_timestamps=DELTAS)
    yield mix
    mix.close()


def test_every_dataset_is_fused(union, intersection):
    assert union.fused_out == {} and intersection.fused_out == {}
    assert union._fused.gather(np.arange(len(union))) is not None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_batches_equal_the_per_dataset_path(union, intersection, data):
    for mix in (union, intersection):
        n = len(mix)
        indices = np.array(data.draw(st.lists(st.integers(-n, n - 1), max_size=40)), dtype=np.int64)
        if data.draw(st.booleans()):
            indices = np.sort(indices)
        assert_same(fused(mix, indices), per_dataset(mix, indices))


def test_every_frame_equals_the_per_dataset_path(union, intersection):
    for mix in (union, intersection):
        everything = np.arange(len(mix))
        assert_same(fused(mix, everything), per_dataset(mix, everything))
        assert_same(fused(mix, everything[::-1].astype(np.int32)), per_dataset(mix, everything[::-1]))
    batch = union.get_batch(np.arange(len(union)))  # what is padded, cast and zero-filled, checked by hand too
    c = batch["dataset_index"] == 2
    assert batch["torque"].dtype == np.float64 and not batch["torque_is_pad"][c].any()
    assert batch["gripper_is_pad"][~(batch["dataset_index"] == 1)].all() and (batch["gripper"][c] == 0).all()
    assert (batch["observation.state_dim_is_pad"][c] == [False] * 4 + [True] * 2).all()


def test_get_batches_and_errors_are_the_per_dataset_paths(union):
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(union), size) for size in (5, 0, 17, 1)]
    for got, b in zip(union.get_batches(batches), batches):
        assert_same(got, per_dataset(union, b))
    for bad in ([len(union)], [-len(union) - 1]):
        with pytest.raises(FrameIndexError, match="out of range"):
            union.get_batch(bad)
    assert_same(union.get_batch([]), per_dataset(union, np.zeros(0, dtype=np.int64)))


def test_compressed_and_raw_cameras_mix(tmp_path):
    cam = "observation.images.top"
    sources = [write_sample_dataset(tmp_path / name, n_episodes=3, lengths=(8, 14), fps=FPS, seed=seed,
                                    image_keys=[cam], image_shape=(8, 10, 3)) for seed, name in enumerate("xy")]
    x, y = map(str, sources)
    deltas = {**DELTAS, cam: [-0.1, 0.0]}
    with lz.open_mixture([x, y], delta_timestamps=deltas, storage={x: {cam: "compact"}},
                         root={x: tmp_path / "x.zarr", y: tmp_path / "y.zarr"}, progress=False) as mix:
        assert mix.fused_out == {}
        assert cam in GatherLayout.of(mix.datasets[0]).outside and cam in GatherLayout.of(mix.datasets[1]).specs
        rng = np.random.default_rng(2)
        for indices in (np.arange(len(mix)), rng.integers(0, len(mix), 30)):
            assert_same(fused(mix, indices), per_dataset(mix, indices))


def test_a_dataset_refreshed_after_an_append_is_followed(tmp_path, stores):
    writable = make_store(tmp_path / "w", {"observation.state": ("float32", [4]), "action": ("float32", [3])},
                          [6, 9], seed=7)
    with lz.open_mixture([writable, stores["d"]], delta_timestamps=DELTAS) as mix:
        before = mix.get_batch(np.arange(len(mix)))
        with lz.open_dataset(writable, mode="r+") as w:
            rng = np.random.default_rng(9)
            w.add_episode({"observation.state": rng.standard_normal((11, 4)).astype(np.float32),
                           "action": rng.standard_normal((11, 3)).astype(np.float32)}, task="a new task")
        assert mix.datasets[0].refresh() and len(mix.datasets[0]) == 26
        everything = np.arange(len(mix))  # the mixture's indices stay where they were
        after = fused(mix, everything)
        assert mix._fused._resized
        assert_same(after, per_dataset(mix, everything))
        assert_same(after, before)
        assert mix.fused_out == {}
        # the appended episode, through a new mixture of the refreshed store: its frames and its new task
        with lz.open_mixture([writable, stores["d"]], delta_timestamps=DELTAS) as fresh:
            tail = np.arange(15, 26)
            got = fused(fresh, tail)
            assert_same(got, per_dataset(fresh, tail))
            assert got["task"] == ["a new task"] * 11


def test_datasets_that_keep_their_own_path_are_named_and_still_served(tmp_path, stores):
    trimmed = make_store(tmp_path / "t", {"observation.state": ("float32", [4]), "action": ("float32", [3])},
                         [4, 6, 5], seed=5)
    with lz.open_dataset(trimmed, mode="r+") as w:
        w.delete_episodes([0])  # stored episode_index / index now exceed LeRobot's: corrected per episode
    with lz.open_mixture([stores["d"], trimmed], delta_timestamps=DELTAS) as mix:
        assert list(mix.fused_out) == [trimmed] and "deleted" in mix.fused_out[trimmed]
        for indices in (np.arange(len(mix)), np.array([len(mix) - 1, 0])):
            assert mix._fused.gather(indices) is None
            assert_same(mix.get_batch(indices), per_dataset(mix, indices))
        only_d = np.arange(int(mix.offsets[1]))  # a batch of the fused datasets alone is gathered at once
        assert_same(fused(mix, only_d), per_dataset(mix, only_d))
    mix.close()
    with pytest.raises(StoreClosedError):
        mix.get_batch([0])


def test_a_closed_dataset_is_refused_as_before(stores):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mix = lz.open_mixture([stores["c"], stores["d"]])
    mix.datasets[1].close()
    assert_same(mix.get_batch([0, 1]), per_dataset(mix, np.array([0, 1])))
    with pytest.raises(StoreClosedError):
        mix.get_batch([len(mix) - 1])
    mix.close()


def test_tasks_and_frames_changed_in_place_are_seen(tmp_path, stores):
    """set_task and edit work in place: the fused maps share the datasets' pages, and a task added after the
    layout is learnt (its first batch served per dataset, which learns it, then fused again)."""
    writable = make_store(tmp_path / "w", {"observation.state": ("float32", [4]), "action": ("float32", [3])},
                          [6, 9], seed=8)
    with lz.open_mixture([stores["d"], writable], delta_timestamps=DELTAS) as mix:
        everything = np.arange(len(mix))
        fused(mix, everything)
        with lz.open_dataset(writable, mode="r+") as w:
            w.set_task(1, "a task set later")
        got = mix.get_batch(everything)
        assert_same(got, per_dataset(mix, everything))
        assert got["task"][-9:] == ["a task set later"] * 9
        assert_same(fused(mix, everything), got)


def test_lazy_datasets_keep_their_path_until_their_episodes_are_local(tmp_path):
    sources = [str(write_sample_dataset(tmp_path / name, n_episodes=4, lengths=(6, 12), fps=FPS, seed=seed))
               for seed, name in enumerate("pq")]
    with lz.open_mixture(sources, lazy=True, delta_timestamps=DELTAS, progress=False,
                         root={s: tmp_path / f"{Path(s).name}.zarr" for s in sources}) as mix:
        assert set(mix.fused_out) == set(sources) and all("lazy" in why for why in mix.fused_out.values())
        everything = np.arange(len(mix))
        want = per_dataset(mix, everything)  # fetches every episode
        assert_same(mix.get_batch(everything), want)
        with pickle.loads(pickle.dumps(mix)) as again:  # as in a DataLoader worker: every episode is local now
            assert again.fused_out == {}
            assert_same(fused(again, everything), want)
