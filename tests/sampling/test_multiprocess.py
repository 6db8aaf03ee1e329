"""The dataset across processes and threads: cheap pickling, fork/spawn pools, map eviction, concurrent reads."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import pathlib
import pickle
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest

import lerobot_zarr
from lerobot_zarr import LeRobotZarrDataset
from lerobot_zarr.testing.sample_data import write_sample_dataset

FPS = 30
IMAGE = "observation.images.top"
DELTAS = {"observation.state": [-2 / FPS, 0.0], "action": [k / FPS for k in range(4)]}


# ----------------------------------------------------------------------------------------------- helpers


def source_columns(root: pathlib.Path) -> dict[str, np.ndarray]:
    """Reference values read straight from the source parquet files (not through the library)."""
    files = sorted((root / "data").rglob("*.parquet"))
    cols: dict[str, list] = {}
    for file in files:
        table = pq.read_table(file, columns=["observation.state", "action", "index", "episode_index"])
        for name in table.column_names:
            cols.setdefault(name, []).extend(table.column(name).to_pylist())
    return {"observation.state": np.array(cols["observation.state"], dtype=np.float32),
            "action": np.array(cols["action"], dtype=np.float32),
            "index": np.array(cols["index"], dtype=np.int64),
            "episode_index": np.array(cols["episode_index"], dtype=np.int64)}


def expected_window(ref: dict[str, np.ndarray], g: int, key: str, deltas: list[float]) -> tuple[np.ndarray, np.ndarray]:
    ep = ref["episode_index"]
    lo = int(np.flatnonzero(ep == ep[g])[0])
    hi = int(np.flatnonzero(ep == ep[g])[-1]) + 1
    rows, pads = [], []
    for d in deltas:
        q = g + round(d * FPS)
        pads.append(q < lo or q >= hi)
        rows.append(ref[key][min(max(q, lo), hi - 1)])
    return np.stack(rows), np.array(pads)


def assert_items_equal(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for key in a:
        if key == "task":
            assert a[key] == b[key]
        else:
            x, y = np.asarray(a[key]), np.asarray(b[key])
            assert x.dtype == y.dtype and x.shape == y.shape, key
            np.testing.assert_array_equal(x, y, err_msg=key)


def assert_batches_equal(a: dict, b: dict) -> None:
    assert_items_equal(a, b)


# Pool workers: the dataset arrives through the initializer (inherited as is under fork, pickled under spawn).
_WORKER_DS = None


def _init_worker(ds) -> None:
    global _WORKER_DS
    _WORKER_DS = ds


def _worker_item(i: int) -> dict:
    return _WORKER_DS[i]


def _worker_batch(indices: list[int]) -> dict:
    return _WORKER_DS.get_batch(indices)


def _item_of(args) -> dict:
    ds, i = args
    return ds[i]


# ----------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    base = tmp_path_factory.mktemp("mp_small")
    src = write_sample_dataset(base / "src", n_episodes=8, lengths=(3, 20), seed=1, image_keys=(IMAGE,),
                               image_shape=(6, 8, 3), extra_nd=True)
    store = base / "store"
    lerobot_zarr.open_dataset(src, root=store, progress=False)
    return src, store


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """Many short episodes: more than any small map budget."""
    base = tmp_path_factory.mktemp("mp_many")
    src = write_sample_dataset(base / "src", n_episodes=120, lengths=(2, 9), seed=2, episodes_per_file=25)
    store = base / "store"
    lerobot_zarr.open_dataset(src, root=store, progress=False)
    return src, store, source_columns(src)


def open_ds(store, **kwargs):
    return lerobot_zarr.open_dataset(store, progress=False, **kwargs)


# ----------------------------------------------------------------------------------------------- pickling


def test_pickle_is_small_and_independent_of_size(small, many):
    small_store = small[1]
    sizes = []
    for store in (small_store, many[1]):
        ds = open_ds(store, delta_timestamps=DELTAS)
        cold = len(pickle.dumps(ds))
        ds.get_batch(np.arange(len(ds)))  # every map open
        warm = len(pickle.dumps(ds))
        assert cold < 2048 and warm < 2048, (cold, warm)
        sizes.append(warm - len(str(store)))
    # 120 episodes / 600 frames vs 8 episodes: the pickle does not grow with the data
    assert abs(sizes[0] - sizes[1]) < 64, sizes


def test_pickled_copy_returns_identical_items(small):
    _, store = small
    for kwargs in ({}, {"delta_timestamps": {**DELTAS, IMAGE: [-1 / FPS, 0]}},
                   {"episodes": [6, 1, 3], "delta_timestamps": DELTAS, "image_format": "float32_chw"}):
        ds = open_ds(store, **kwargs)
        ds[0]
        copy = pickle.loads(pickle.dumps(ds))
        assert len(copy) == len(ds)
        assert copy.image_format == ds.image_format
        for i in range(len(ds)):
            assert_items_equal(copy[i], ds[i])
        idx = np.arange(len(ds))[::-1]
        assert_batches_equal(copy.get_batch(idx), ds.get_batch(idx))


# ----------------------------------------------------------------------------------------------- pools


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_items_equal_parent(small, method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"start method {method!r} not available on this platform")
    _, store = small
    ds = open_ds(store, delta_timestamps={**DELTAS, IMAGE: [0, 1 / FPS]})
    indices = list(range(len(ds)))
    ctx = mp.get_context(method)
    with ctx.Pool(2, initializer=_init_worker, initargs=(ds,)) as pool:
        items = pool.map(_worker_item, indices, chunksize=7)
        batches = pool.map(_worker_batch, [indices[k:k + 9] for k in range(0, len(indices), 9)])
        # the dataset also travels as a task argument
        passed = pool.map(_item_of, [(ds, i) for i in (0, len(ds) // 2, len(ds) - 1)])
    for i, item in zip(indices, items):
        assert_items_equal(item, ds[i])
    for k, batch in zip(range(0, len(indices), 9), batches):
        assert_batches_equal(batch, ds.get_batch(indices[k:k + 9]))
    for i, item in zip((0, len(ds) // 2, len(ds) - 1), passed):
        assert_items_equal(item, ds[i])


def test_fork_after_parent_opened_maps(small):
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("fork not available")
    _, store = small
    ds = open_ds(store, delta_timestamps=DELTAS)
    ds[0]  # maps of episode 0 open in the parent
    expected = [ds[i] for i in range(len(ds))]  # now every episode is mapped
    half = open_ds(store)
    half[len(half) - 1]  # only the last episode mapped
    with mp.get_context("fork").Pool(2, initializer=_init_worker, initargs=(ds,)) as pool:
        got = pool.map(_worker_item, range(len(ds)), chunksize=5)
        got_batch = pool.map(_worker_batch, [[0, len(ds) - 1, 3], list(range(len(ds)))])
    for a, b in zip(got, expected):
        assert_items_equal(a, b)
    assert_batches_equal(got_batch[1], ds.get_batch(list(range(len(ds)))))
    with mp.get_context("fork").Pool(2, initializer=_init_worker, initargs=(half,)) as pool:
        got = pool.map(_worker_item, range(len(half)), chunksize=5)
    for i, item in enumerate(got):
        assert_items_equal(item, half[i])
    # the parent still reads correctly after its children exited
    for i in (0, len(ds) - 1):
        assert_items_equal(ds[i], expected[i])


# ----------------------------------------------------------------------------------------------- map budget


def _mapped_chunk_files(store: pathlib.Path) -> int:
    """Distinct chunk files of ``store`` mapped in this process (Linux)."""
    prefix = str(store.resolve())
    with open("/proc/self/maps") as f:
        return len({line.split(None, 5)[5].strip() for line in f
                    if len(line.split(None, 5)) == 6 and line.split(None, 5)[5].startswith(prefix)})


@pytest.mark.parametrize("budget", [1, 8, 30])
def test_tiny_map_budget_random_access(many, budget):
    _, store, ref = many
    ds = LeRobotZarrDataset(store, max_open_maps=budget, delta_timestamps=DELTAS)
    n = len(ds)
    assert n == len(ref["index"])
    rng = np.random.default_rng(budget)
    order = np.concatenate([rng.integers(0, n, 400), np.arange(n), np.arange(n)[::-1]])
    for i in order.tolist():
        item = ds[i]
        assert int(item["index"]) == i
        np.testing.assert_array_equal(item["observation.state"][1], ref["observation.state"][i])
        for key in DELTAS:
            window, pad = expected_window(ref, i, key, DELTAS[key])
            np.testing.assert_array_equal(item[key], window, err_msg=key)
            np.testing.assert_array_equal(item[f"{key}_is_pad"], pad, err_msg=key)


def test_tiny_map_budget_bounds_open_maps(many):
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps")
    _, store, _ = many
    n_features = len(open_ds(store).meta.stored_features)
    budget = 3 * n_features  # room for three episodes
    gc.collect()
    baseline = _mapped_chunk_files(store)  # maps of other, still alive datasets (normally none)
    ds = LeRobotZarrDataset(store, max_open_maps=budget)
    rng = np.random.default_rng(0)
    for i in rng.integers(0, len(ds), 300).tolist():
        ds[i]
        assert _mapped_chunk_files(store) - baseline <= budget
    # a batch over the first half of the episodes is gathered in parts: the budget holds throughout
    half = ds.episode_frames(59).stop
    batch = ds.get_batch(np.arange(half))
    assert _mapped_chunk_files(store) - baseline <= budget
    np.testing.assert_array_equal(batch["index"], ds.get_batch(np.arange(half)[::-1])["index"][::-1])
    for i in rng.integers(half, len(ds), 50).tolist():
        ds[i]
        assert _mapped_chunk_files(store) - baseline <= budget
    del ds
    gc.collect()
    assert _mapped_chunk_files(store) <= baseline, "maps outlive their dataset"


def test_map_budget_restored_after_batch_over_every_episode(many):
    """README: at most LEROBOT_ZARR_MAX_MAPS maps per dataset, also after a batch over every episode."""
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps")
    _, store, _ = many
    n_features = len(open_ds(store).meta.stored_features)
    budget = 3 * n_features
    gc.collect()
    baseline = _mapped_chunk_files(store)
    ds = LeRobotZarrDataset(store, max_open_maps=budget)
    ds.get_batch(np.arange(len(ds)))  # maps every episode
    for i in np.random.default_rng(1).integers(0, len(ds), 50).tolist():
        ds[i]
    assert _mapped_chunk_files(store) - baseline <= budget


@pytest.mark.parametrize("budget", [1, 8])
def test_tiny_map_budget_batches_spanning_many_episodes(many, budget):
    _, store, ref = many
    ds = LeRobotZarrDataset(store, max_open_maps=budget, delta_timestamps=DELTAS)
    n = len(ds)
    rng = np.random.default_rng(100 + budget)
    for size in (2, 17, 64, 300, n):
        for _ in range(3):
            idx = rng.integers(-n, n, size)
            batch = ds.get_batch(idx)
            g = np.where(idx < 0, idx + n, idx)
            np.testing.assert_array_equal(batch["index"], g)
            np.testing.assert_array_equal(batch["observation.state"][:, 1], ref["observation.state"][g])
            for key in DELTAS:
                for row, gi in enumerate(g.tolist()):
                    window, pad = expected_window(ref, gi, key, DELTAS[key])
                    np.testing.assert_array_equal(batch[key][row], window, err_msg=key)
                    np.testing.assert_array_equal(batch[f"{key}_is_pad"][row], pad, err_msg=key)
        # single items between batches force evictions of what the batch mapped
        for i in rng.integers(0, n, 20).tolist():
            assert int(ds[i]["index"]) == i
            np.testing.assert_array_equal(ds[i]["action"][0], ref["action"][i])


# ----------------------------------------------------------------------------------------------- threads


@pytest.mark.parametrize("budget", [None, 8])
def test_threads_share_one_dataset(many, budget):
    _, store, ref = many
    kwargs = {} if budget is None else {"max_open_maps": budget}
    ds = LeRobotZarrDataset(store, delta_timestamps=DELTAS, **kwargs)
    n = len(ds)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work(seed: int) -> None:
        try:
            rng = np.random.default_rng(seed)
            barrier.wait()
            for _ in range(150):
                if rng.random() < 0.5:
                    i = int(rng.integers(0, n))
                    item = ds[i]
                    assert int(item["index"]) == i
                    window, pad = expected_window(ref, i, "action", DELTAS["action"])
                    np.testing.assert_array_equal(item["action"], window)
                    np.testing.assert_array_equal(item["action_is_pad"], pad)
                    np.testing.assert_array_equal(item["observation.state"][1], ref["observation.state"][i])
                else:
                    idx = rng.integers(0, n, int(rng.integers(1, 40)))
                    batch = ds.get_batch(idx)
                    np.testing.assert_array_equal(batch["index"], idx)
                    np.testing.assert_array_equal(batch["observation.state"][:, 1], ref["observation.state"][idx])
                    np.testing.assert_array_equal(batch["action"][:, 0], ref["action"][idx])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a reader thread hung"
    if errors:
        raise errors[0]
