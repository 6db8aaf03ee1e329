"""Writing stores in place (lerobot_zarr.writing.writer): create, append, edit, delete, set_task, ring buffer, locking.

Every check compares the store against an independent reference model kept by the test (a list of per-episode
numpy dicts updated by hand as each operation is applied), and the committed stats against a from-scratch
recomputation written here with plain numpy (np.quantile, LeRobot's image frame sampling), never against the
library's own output.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import lerobot_zarr as lz
import lerobot_zarr.writing.transaction as transaction_module
from lerobot_zarr import (
    ArgumentError,
    DiskSpaceError,
    FrameIndexError,
    LeRobotZarrDataset,
    SchemaMismatchError,
    StoreClosedError,
    StoreError,
    StoreLockedError,
    UnsupportedDtypeError,
    UnsupportedStoreError,
    WritableDataset,
)
from lerobot_zarr.store.state import read_state

MAIN = Path(__file__).resolve().parents[2]
SHARED_DATASETS = Path(__file__).resolve().parents[2] / ".." / "shared" / "datasets"
FPS = 10
JOINTS = [f"joint_{k}" for k in range(14)]
CAM = "observation.images.cam"
FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [14], "names": JOINTS},
    "action": {"dtype": "float32", "shape": [14], "names": JOINTS},
    CAM: {"dtype": "image", "shape": [6, 8, 3], "names": ["height", "width", "channels"]},
    "observation.counter": {"dtype": "int64", "shape": [1], "names": None},  # LeRobot scalar: stored as ()
    "observation.grid": {"dtype": "float64", "shape": [2, 3], "names": None},  # a 2-D feature
}
DEFAULTS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_NAMES = ("min", "max", "mean", "std", "count", *QUANTILES)
TASKS = ("pick the cube", "place the cube", "push the cube")


# ------------------------------------------------------------------------------------------------ helpers


def frame_shape(ft: dict) -> tuple[int, ...]:
    """Shape of one stored frame of a LeRobot feature spec ([1] non-image features are scalars)."""
    shape = tuple(int(s) for s in ft["shape"])
    return () if shape == (1,) and ft["dtype"] != "image" else shape


def np_dtype(ft: dict) -> np.dtype:
    return np.dtype(np.uint8) if ft["dtype"] == "image" else np.dtype(ft["dtype"])


def make_frames(rng: np.random.Generator, n: int, features: dict = FEATURES) -> dict[str, np.ndarray]:
    """Random frames (T, *frame_shape) for every feature, in the features' own dtypes."""
    out = {}
    for name, ft in features.items():
        shape, dtype = (n, *frame_shape(ft)), np_dtype(ft)
        if ft["dtype"] == "image":
            out[name] = rng.integers(0, 256, shape, dtype=np.uint8)
        elif dtype.kind == "f":
            out[name] = (rng.normal(size=shape) * 10).astype(dtype)
        elif dtype.kind == "b":
            out[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            out[name] = rng.integers(-1_000_000, 1_000_000, shape).astype(dtype)
    return out


PACK_BYTES = 144 * 24  # 24 frames of the widest feature (the camera) per pack: tests cross many pack boundaries


def new_store(root: Path, features: dict = FEATURES, **kwargs) -> WritableDataset:
    kwargs.setdefault("durable", False)
    kwargs.setdefault("min_free_bytes", 0)
    kwargs.setdefault("pack_bytes", PACK_BYTES)
    return lz.create(root, fps=FPS, features=features, robot_type="test_bot", **kwargs)


class Model:
    """The reference: what the store must hold, kept by hand (per-episode numpy arrays and per-frame tasks)."""

    def __init__(self, features: dict = FEATURES, fps: float = FPS, capacity: int | None = None):
        self.features = {k: v for k, v in features.items() if k not in DEFAULTS}
        self.fps = fps
        self.capacity = capacity
        self.episodes: list[dict] = []  # {feature: (T, *shape) array, "task": [str] * T, optional "timestamp"}
        self.tasks: list[str] = []

    def _task(self, task: str) -> None:
        if task not in self.tasks:
            self.tasks.append(task)

    def _e(self, e: int) -> int:
        n = len(self.episodes)
        assert -n <= e < n
        return e % n

    def lengths(self) -> list[int]:
        return [len(ep["task"]) for ep in self.episodes]

    def add(self, frames: dict, task) -> int:
        n = len(frames[next(iter(self.features))])
        per_frame = [task] * n if isinstance(task, str) else list(task)
        for t in per_frame:
            self._task(t)
        ep = {k: np.array(frames[k], dtype=np_dtype(ft)).reshape(n, *frame_shape(ft)) for k, ft in self.features.items()}
        ep["task"] = per_frame
        if "timestamp" in frames:
            ep["timestamp"] = np.asarray(frames["timestamp"], dtype=np.float32).reshape(n)
        if self.capacity is not None:
            while self.episodes and sum(self.lengths()) + n > self.capacity:
                self.episodes.pop(0)
        self.episodes.append(ep)
        return len(self.episodes) - 1

    def delete_episodes(self, episodes) -> None:
        gone = {self._e(e) for e in episodes}
        self.episodes = [ep for i, ep in enumerate(self.episodes) if i not in gone]

    def delete_frames(self, e: int, frame_ids: list[int]) -> None:
        """frame_ids: frame indices (any order, negatives allowed, duplicates ok)."""
        e = self._e(e)
        ep = self.episodes[e]
        n = len(ep["task"])
        gone = {f % n for f in frame_ids}
        if not gone:
            return
        if len(gone) == n:
            del self.episodes[e]
            return
        keep = np.array([i for i in range(n) if i not in gone], dtype=np.int64)
        new = {k: ep[k][keep] for k in self.features}
        new["task"] = [ep["task"][i] for i in keep.tolist()]
        self.episodes[e] = new  # the rewritten episode's timestamps are frame_index / fps again

    def edit(self, e: int, first: int, stop: int, values: dict) -> None:
        ep = self.episodes[self._e(e)]
        for k, v in values.items():
            ep[k][first:stop] = v

    def set_task(self, episodes, task: str) -> None:
        self._task(task)
        for e in episodes:
            ep = self.episodes[self._e(e)]
            ep["task"] = [task] * len(ep["task"])

    def expected(self) -> dict:
        """Every stored feature (LeRobot's own columns included) over all frames, and the task strings."""
        cols: dict[str, list] = {k: [] for k in [*self.features, *DEFAULTS, "task"]}
        start = 0
        for e, ep in enumerate(self.episodes):
            n = len(ep["task"])
            for k in self.features:
                cols[k].append(ep[k])
            ts = ep.get("timestamp")
            cols["timestamp"].append((np.arange(n, dtype=np.float64) / self.fps).astype(np.float32) if ts is None else ts)
            cols["frame_index"].append(np.arange(n, dtype=np.int64))
            cols["episode_index"].append(np.full(n, e, dtype=np.int64))
            cols["index"].append(np.arange(start, start + n, dtype=np.int64))
            cols["task_index"].append(np.array([self.tasks.index(t) for t in ep["task"]], dtype=np.int64))
            cols["task"].extend(ep["task"])
            start += n
        out: dict = {"task": cols.pop("task")}
        for k, parts in cols.items():
            if k in self.features:
                ft = self.features[k]
                empty = np.zeros((0, *frame_shape(ft)), dtype=np_dtype(ft))
            else:
                empty = np.zeros(0, dtype=np.float32 if k == "timestamp" else np.int64)
            out[k] = np.concatenate(parts) if parts else empty
        return out

    def kinds(self) -> dict[str, str]:
        out = {k: "image" if ft["dtype"] == "image" else "numeric" for k, ft in self.features.items()}
        return {**out, **{k: "numeric" for k in DEFAULTS}}


def assert_array_equal_bits(got, want: np.ndarray, what: str) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if got.tobytes() != want.tobytes():
        if want.ndim == 0:
            raise AssertionError(f"{what}: got {got}, expected {want}")
        same = (got == want) | (np.isnan(got) & np.isnan(want) if got.dtype.kind == "f" else False)
        bad = np.flatnonzero(~same.reshape(len(want), -1).all(axis=1))
        raise AssertionError(f"{what}: values differ in rows {bad[:5].tolist()}: got {got[bad[:1]]}, "
                             f"expected {want[bad[:1]]}")


def assert_columns(got: dict, want: dict, what: str) -> None:
    assert set(got) == set(want), f"{what}: keys {sorted(got)} != {sorted(want)}"
    for k, v in want.items():
        if k == "task":
            assert list(got[k]) == list(v), f"{what}: task strings differ"
        else:
            assert_array_equal_bits(got[k], v, f"{what}: {k}")


# ---- stats, recomputed from scratch


def _sample_indices(n: int) -> np.ndarray:
    """LeRobot's image-stats frame sampling (compute_stats.sample_indices): about n**0.75 evenly spaced frames,
    at least min(n, 100), at most 10000."""
    min_samples = min(n, 100)
    count = max(min_samples, min(int(n ** 0.75), 10_000))
    return np.round(np.linspace(0, n - 1, count)).astype(np.int64)


def ref_episode_stats(values: np.ndarray, kind: str) -> dict[str, np.ndarray]:
    n = len(values)
    if kind == "image":
        sample = values[_sample_indices(n)]
        h, w, c = sample.shape[1:]
        if max(h, w) >= 300:  # LeRobot's auto_downsample_height_width (target 150 px)
            step = int(w / 150) if w > h else int(h / 150)
            sample = sample[:, ::step, ::step]
        x = sample.reshape(-1, c).astype(np.float64) / 255.0
        out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
        out.update(zip(QUANTILES, np.quantile(x, list(QUANTILES.values()), axis=0), strict=True))
        out = {k: v.reshape(c, 1, 1) for k, v in out.items()}
        out["count"] = np.array([len(sample)])
        return out
    # LeRobot 0.6.1's rule: over every axis but the last (a (2, 3) feature's stats have shape (3,)), count in frames
    x = values.astype(np.float64).reshape(-1, values.shape[-1] if values.ndim > 1 else 1)
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
    # every quantile in one call: the values of one call per quantile, bit for bit
    out.update(zip(QUANTILES, np.quantile(x, list(QUANTILES.values()), axis=0), strict=True))
    out["count"] = np.array([n])
    return out


def ref_merge(per_episode: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    counts = np.array([s["count"][0] for s in per_episode], dtype=np.float64)
    total = counts.sum()
    w = [c / total for c in counts]
    mean = sum(wi * s["mean"] for wi, s in zip(w, per_episode))
    var = sum(wi * (s["std"] ** 2 + (s["mean"] - mean) ** 2) for wi, s in zip(w, per_episode))
    out = {"min": np.min([s["min"] for s in per_episode], axis=0), "max": np.max([s["max"] for s in per_episode], axis=0),
           "mean": mean, "std": np.sqrt(var), "count": np.array([total])}
    for name in QUANTILES:
        out[name] = sum(wi * s[name] for wi, s in zip(w, per_episode))
    return out


def ref_stats(model: Model) -> dict[str, dict[str, np.ndarray]]:
    if not model.episodes:
        return {}
    exp = model.expected()
    bounds = np.cumsum([0, *model.lengths()])
    out = {}
    for k, kind in model.kinds().items():
        eps = [ref_episode_stats(exp[k][a:b], kind) for a, b in itertools.pairwise(bounds)]
        out[k] = ref_merge(eps)
    return out


def assert_stats(got: dict, model: Model, what: str, want: dict | None = None) -> None:
    """``got`` against the reference stats of ``model`` (``want``: those, computed already)."""
    want = ref_stats(model) if want is None else want
    assert set(got) == set(want), f"{what}: stats of {sorted(got)}, expected {sorted(want)}"
    for k, stats in want.items():
        assert set(got[k]) == set(STAT_NAMES), f"{what}: stats[{k!r}] has {sorted(got[k])}"
        for name, w in stats.items():
            g = np.asarray(got[k][name], dtype=np.float64)
            assert g.shape == w.shape, f"{what}: stats[{k!r}][{name!r}] shape {g.shape}, expected {w.shape}"
            assert np.allclose(g, w, rtol=1e-6, atol=1e-9), \
                f"{what}: stats[{k!r}][{name!r}] = {g.ravel()[:6]}, expected {w.ravel()[:6]}"


# ---- whole-dataset check


def check_invariants(batch: dict, lengths: list[int], meta, fps: float, what: str, *, exact_timestamps=True) -> None:
    """LeRobot's invariants on a batch of every frame."""
    n = int(sum(lengths))
    ep = np.repeat(np.arange(len(lengths)), lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if lengths else np.zeros(0, np.int64)
    assert np.array_equal(batch["episode_index"], ep), f"{what}: episode_index is not the episode's position"
    assert np.array_equal(batch["index"], np.arange(n)), f"{what}: index is not contiguous from 0"
    frame_index = np.arange(n) - np.repeat(starts, lengths)
    assert np.array_equal(batch["frame_index"], frame_index), f"{what}: frame_index is not 0..n-1"
    ts = np.asarray(batch["timestamp"])
    assert ts.dtype == np.float32
    tol = 1e-6 if exact_timestamps else 1e-4
    assert np.allclose(ts, (frame_index / fps).astype(np.float32), atol=tol, rtol=0), f"{what}: timestamps"
    assert np.array_equal(meta.episode_length, lengths), what
    assert np.array_equal(meta.episode_start, starts), f"{what}: dataset_from_index"
    assert np.array_equal(meta.episode_end, starts + np.asarray(lengths, dtype=np.int64)), f"{what}: dataset_to_index"
    for e, s in enumerate(starts.tolist()):  # dataset_from_index is the index of the episode's first frame
        assert batch["index"][s] == s and batch["frame_index"][s] == 0 and batch["episode_index"][s] == e


def check_dataset(ds, model: Model, what: str, *, items: bool = True, episodes: bool = True, fresh: bool = True,
                  stats: bool = True, exact_timestamps: bool = True) -> None:
    exp = model.expected()
    lengths = model.lengths()
    n = int(sum(lengths))
    meta = ds.meta
    assert len(ds) == n, f"{what}: {len(ds)} frames, expected {n}"
    assert meta.total_episodes == len(lengths) and meta.total_frames == n, what
    assert list(meta.tasks) == model.tasks, f"{what}: tasks {meta.tasks}, expected {model.tasks}"
    assert meta.info["total_episodes"] == len(lengths) and meta.info["total_frames"] == n, what
    assert meta.info["total_tasks"] == len(model.tasks), what
    assert meta.info["splits"] == ({"train": f"0:{len(lengths)}"} if lengths else {}), what
    batch = ds.get_batch(np.arange(n))
    assert_columns(batch, exp, f"{what} get_batch")
    check_invariants(batch, lengths, meta, model.fps, what, exact_timestamps=exact_timestamps)
    if items:
        for i in range(n):
            item = ds[i]
            assert set(item) == set(exp), f"{what}: ds[{i}] keys {sorted(item)}"
            for k, v in exp.items():
                if k == "task":
                    assert item[k] == v[i], f"{what}: ds[{i}]['task']"
                else:
                    assert_array_equal_bits(item[k], v[i], f"{what}: ds[{i}][{k!r}]")
    if episodes:
        bounds = np.cumsum([0, *lengths])
        for e in range(len(lengths)):
            arrays = ds.episode(e)
            assert set(arrays) == set(exp) - {"task"}, f"{what}: episode({e}) keys {sorted(arrays)}"
            for k in arrays:
                assert_array_equal_bits(arrays[k], exp[k][bounds[e]:bounds[e + 1]], f"{what}: episode({e})[{k!r}]")
    if stats:
        want = ref_stats(model)
        assert_stats(read_state(ds.root).stats, model, f"{what} committed stats", want)
        assert_stats(meta.stats, model, f"{what} meta.stats", want)
    if fresh:
        reader = lz.open_dataset(ds.root, progress=False)
        assert type(reader) is LeRobotZarrDataset
        assert len(reader) == n and list(reader.meta.tasks) == model.tasks, f"{what} (fresh reader)"
        assert_columns(reader.get_batch(np.arange(n)), exp, f"{what} (fresh reader)")
        assert np.array_equal(reader.meta.episode_length, lengths)


def check_on_disk(root: Path, model: Model, what: str, *, first_task: bool = False) -> None:
    """The on-disk contract (store.py), read with zarr-python and numpy, not through the library's reader: the
    episode table in the root and its zarr copies, ``frame_live`` marking exactly the rows of committed episodes,
    and every live frame of the user features where the table's ``episode_frame`` says."""
    import zarr

    state = read_state(root)
    lengths = np.asarray(model.lengths(), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if len(lengths) else lengths
    table = state.table
    assert np.array_equal(table.length, lengths) and np.array_equal(table.start, starts), what
    assert (table.chunk < len(state.packs)).all() and (table.offset + table.length <= state.packs.rows[table.chunk]).all()
    group = zarr.open_group(root, mode="r")
    copies = {"episode_start": starts, "episode_end": starts + lengths, "episode_length": lengths,
              "episode_chunk": table.chunk, "episode_offset": table.offset}
    for name, want in copies.items():
        assert np.array_equal(np.asarray(group[name][:]), want), f"{what}: zarr copy {name}"
    if first_task:
        first = [model.tasks.index(ep["task"][0]) for ep in model.episodes]
        assert table.task_index.tolist() == first, f"{what}: episode table task_index (first task) {table.task_index}"
        assert np.asarray(group["episode_task_index"][:]).tolist() == first, f"{what}: zarr episode_task_index"
    # independent of the library: pack k spans max(rows[k], 1) frames along the grid, episodes sit at their offset
    sizes = np.maximum(state.packs.rows, 1)
    first_row = (np.cumsum(sizes) - sizes)[table.chunk] + table.offset if len(table) else np.zeros(0, np.int64)
    assert np.array_equal(np.asarray(group["episode_frame"][:]), first_row), f"{what}: zarr episode_frame"
    rows = np.concatenate([np.arange(f, f + n) for f, n in zip(first_row, lengths, strict=True)]) if len(lengths) \
        else np.zeros(0, np.int64)
    live = np.asarray(group["frame_live"][:])
    assert live.shape == (int(sizes.sum()),), f"{what}: frame_live has {live.shape} rows, the grid {sizes.sum()}"
    assert np.array_equal(np.flatnonzero(live), np.sort(rows)), f"{what}: frame_live does not mark the live rows"
    exp = model.expected()
    for k in model.features:
        values = np.asarray(group[k][:])
        assert values.shape[0] == len(live), f"{what}: zarr {k} has {values.shape[0]} rows, grid {len(live)}"
        assert_array_equal_bits(values[rows], exp[k], f"{what}: zarr read of {k}")


def store_snapshot(root: Path) -> tuple:
    """The committed root and every file of the store (but the lock): to check that nothing was written."""
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != ".lock")
    return (root / "zarr.json").read_bytes(), files


def run_py(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(MAIN))
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def popen_py(code: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(MAIN))
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def filled_store(root: Path, rng: np.random.Generator, lengths=(5, 9, 3, 12),
                 **kwargs) -> tuple[WritableDataset, Model]:
    ds, model = new_store(root, **kwargs), Model(capacity=kwargs.get("capacity_frames"))
    for i, n in enumerate(lengths):
        frames = make_frames(rng, n)
        task = TASKS[i % len(TASKS)] if i % 2 == 0 else [TASKS[(i + j // 2) % len(TASKS)] for j in range(n)]
        assert ds.add_episode(frames, task=task) == model.add(frames, task)
    return ds, model


# ------------------------------------------------------------------------------------------------ 1. appends


def test_appends_read_back_bit_exact(tmp_path):
    rng = np.random.default_rng(1)
    root = tmp_path / "store"
    ds = new_store(root)
    model = Model()
    assert isinstance(ds, WritableDataset) and len(ds) == 0 and ds.meta.total_episodes == 0
    check_dataset(ds, model, "empty")
    specs = [(7, TASKS[0]), (1, TASKS[1]), (13, [TASKS[2]] * 6 + [TASKS[0]] * 4 + ["a brand new task"] * 3),
             (4, TASKS[1]), (20, "a brand new task")]
    for n, task in specs:
        frames = make_frames(rng, n)
        if n == 4:  # the scalar feature may also come as (T, 1)
            frames["observation.counter"] = frames["observation.counter"][:, None]
        e = ds.add_episode(frames, task=task)
        assert e == model.add(frames, task)
        check_dataset(ds, model, f"after appending episode {e}", fresh=False)
    check_dataset(ds, model, "all appended")
    assert ds.meta.tasks == [TASKS[0], TASKS[1], TASKS[2], "a brand new task"]
    # the per-frame task list of episode 2
    r = ds.episode_frames(2)
    assert [ds[i]["task"] for i in r] == specs[2][1]
    assert ds.meta.fps == FPS and ds.meta.robot_type == "test_bot"
    assert ds.meta.source == {"kind": "recorded"}
    for name, ft in FEATURES.items():  # the feature specs are kept, LeRobot's own added
        assert ds.meta.features[name]["dtype"] == ft["dtype"] and ds.meta.features[name]["shape"] == ft["shape"]
        assert ds.meta.features[name]["names"] == ft["names"]
    for name in DEFAULTS:
        assert ds.meta.features[name]["shape"] == [1]
    check_on_disk(root, model, "all appended", first_task=True)
    ds.close()
    again = lz.open_dataset(root)
    check_dataset(again, model, "reopened for reading", stats=True, fresh=False)


def test_numeric_features_stats_in_one_pass_equal_one_at_a_time_bit_for_bit():
    """A commit computes its episode's numeric stats side by side (``episodes_stats``): the same bits as one feature
    at a time (scalars, vectors, N-D, ints, bools, NaN, 1 to 400 frames), and the reference's values."""
    from lerobot_zarr.lerobot.format import episode_stats, episodes_stats

    rng = np.random.default_rng(3)
    for _ in range(150):
        n = int(rng.integers(1, 400))
        features = []
        for _ in range(int(rng.integers(1, 12))):
            shape = [(), (1,), (14,), (3, 2)][int(rng.integers(0, 4))]
            kind = int(rng.integers(0, 4))
            v = (rng.standard_normal((n, *shape)).astype(np.float32) * np.float32(10.0 ** rng.integers(-3, 6))
                 if kind == 0 else rng.integers(-1000, 1000, (n, *shape)) if kind == 1
                 else rng.random((n, *shape)) < 0.3 if kind == 2 else rng.standard_normal((n, *shape)))
            if kind == 3 and rng.random() < 0.3:
                v.reshape(-1)[rng.integers(0, v.size)] = np.nan
            features.append(v)
        for v, got in zip(features, episodes_stats(features), strict=True):
            one = episode_stats(v, "float32")
            assert list(got) == list(one)
            for name, want in one.items():
                assert got[name].dtype == want.dtype and got[name].shape == want.shape, (name, v.dtype, v.shape)
                assert got[name].tobytes() == want.tobytes(), f"{name} of {v.dtype}{v.shape} differs"
            if np.isnan(v.astype(np.float64)).any():
                continue  # (quantiles with a NaN: the store's rule, not numpy's)
            for name, want in ref_episode_stats(v, "float32").items():
                assert np.allclose(np.asarray(got[name], np.float64), want, rtol=1e-9, atol=1e-12), \
                    f"{name} of {v.dtype}{v.shape}"


@pytest.mark.parametrize(("n", "shape"), [(1, (24, 32, 3)), (37, (480, 640, 3)), (150, (300, 200, 1)),
                                          (260, (96, 128, 3))])
def test_image_stats_from_each_frames_histogram_are_lerobots(n, shape):
    """A recorder's camera stats, made from each frame's histogram as it is recorded (format.image_histogram, summed
    over LeRobot's sample of frames), are LeRobot's image stats of the frames (the reference: its sample,
    downsampling and numpy's quantiles), to the float's rounding (a histogram's sums are exact)."""
    from lerobot_zarr.lerobot.format import histogram_stats, image_histogram, sampled_histogram

    frames = np.random.default_rng(n).integers(0, 256, (n, *shape), dtype=np.uint8)
    frames[:, :4] = 7  # a repeated value: quantiles fall between equal values
    got = histogram_stats(*sampled_histogram(np.stack([image_histogram(f) for f in frames])))
    want = ref_episode_stats(frames, "image")
    assert set(got) == set(want)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-12, atol=1e-12, err_msg=name)
        assert got[name].shape == value.shape, name


def test_image_stats_use_lerobots_frame_sample_on_long_episodes(tmp_path):
    """Past 100 frames LeRobot computes image stats on a sample of frames (count = frames sampled)."""
    rng = np.random.default_rng(24)
    features = {"action": FEATURES["action"], CAM: {"dtype": "image", "shape": [4, 5, 3], "names": None},
                "observation.images.tall": {"dtype": "image", "shape": [310, 7, 3], "names": None}}  # downsampled
    ds, model = new_store(tmp_path / "s", features=features), Model(features=features)
    for n in (150, 37, 260):
        frames = make_frames(rng, n, features)
        frames[CAM][::3] //= 4  # frames differ in distribution: which ones are sampled matters
        ds.add_episode(frames, task="long")
        model.add(frames, "long")
    check_dataset(ds, model, "long image episodes", items=False)
    counts = [len(_sample_indices(n)) for n in (150, 37, 260)]
    assert counts == [100, 37, 100] and ds.meta.stats[CAM]["count"] == [sum(counts)]
    ds.delete_frames(0, range(40))  # 110 frames left: a new sample
    model.delete_frames(0, list(range(40)))
    check_dataset(ds, model, "after delete_frames", items=False)


def test_other_dtypes(tmp_path):
    rng = np.random.default_rng(25)
    features = {"done": {"dtype": "bool", "shape": [1], "names": None},
                "half": {"dtype": "float16", "shape": [3], "names": None},
                "code": {"dtype": "uint16", "shape": [2], "names": None},
                "small": {"dtype": "int8", "shape": [2, 2], "names": None},
                "gray": {"dtype": "image", "shape": [5, 4, 1], "names": None}}
    ds, model = new_store(tmp_path / "s", features=features), Model(features=features)
    for n in (5, 1, 8):
        frames = make_frames(rng, n, features)
        frames["code"] = frames["code"] % 60000
        frames["small"] = frames["small"] % 100
        ds.add_episode(frames, task="dtypes")
        model.add(frames, "dtypes")
    ds.delete_frames(2, [1, 4])
    model.delete_frames(2, [1, 4])
    check_dataset(ds, model, "bool, float16, uint16, int8, 1-channel image")
    check_on_disk(ds.root, model, "other dtypes")


def test_episode_table_first_task_follows_delete_frames(tmp_path):
    """The episode table's task_index is the episode's first task (store.py), also in the zarr copy
    episode_task_index: deleting an episode's first frames changes it when the frames have different tasks."""
    rng = np.random.default_rng(26)
    ds, model = new_store(tmp_path / "s"), Model()
    frames = make_frames(rng, 4)
    tasks = ["reach", "grasp", "grasp", "lift"]
    ds.add_episode(frames, task=tasks)
    model.add(frames, tasks)
    check_on_disk(ds.root, model, "before", first_task=True)
    ds.delete_frames(0, [0])
    model.delete_frames(0, [0])
    check_dataset(ds, model, "after deleting the first frame")
    check_on_disk(ds.root, model, "after deleting the first frame", first_task=True)


def test_given_timestamps_are_kept(tmp_path):
    rng = np.random.default_rng(2)
    ds, model = new_store(tmp_path / "s"), Model()
    frames = make_frames(rng, 6)
    frames["timestamp"] = (np.arange(6) / FPS + rng.uniform(-3e-5, 3e-5, 6)).astype(np.float32)  # jitter
    ds.add_episode(frames, task="t")
    model.add(frames, "t")
    check_dataset(ds, model, "given timestamps", exact_timestamps=False)
    # deleting frames rewrites the episode: timestamps are frame_index / fps again (LeRobot's invariant)
    ds.delete_frames(0, [0, 3])
    model.delete_frames(0, [0, 3])
    check_dataset(ds, model, "after delete_frames")


# ------------------------------------------------------------------------------------------------ 2. add_frame


def test_add_frame_save_episode_equals_add_episode(tmp_path):
    rng = np.random.default_rng(3)
    a, b = new_store(tmp_path / "a"), new_store(tmp_path / "b")
    model = Model()
    for n, tasks in [(5, ["x"] * 5), (8, ["y"] * 3 + ["x"] * 5), (1, ["z"])]:
        frames = make_frames(rng, n)
        a.add_episode(frames, task=tasks)
        model.add(frames, tasks)
        for i in range(n):
            frame = {k: v[i] for k, v in frames.items()}
            if i % 2:
                b.add_frame(frame, task=tasks[i])
            else:
                b.add_frame({**frame, "task": tasks[i]})
            assert b.episode_buffer_size == i + 1
        assert len(b) == sum(model.lengths()[:-1])  # nothing written before save_episode
        assert b.meta.total_episodes == len(model.episodes) - 1
        assert b.save_episode() == len(model.episodes) - 1
        assert b.episode_buffer_size == 0
    check_dataset(a, model, "add_episode")
    check_dataset(b, model, "add_frame + save_episode")
    assert read_state(a.root).stats == read_state(b.root).stats
    chunk_files = sorted(str(p.relative_to(a.root)) for p in a.root.glob("*/c/**/*") if p.is_file())
    assert chunk_files == sorted(str(p.relative_to(b.root)) for p in b.root.glob("*/c/**/*") if p.is_file())
    for rel in chunk_files:
        assert (a.root / rel).read_bytes() == (b.root / rel).read_bytes(), rel
    # clear_episode_buffer drops the buffered frames
    before = store_snapshot(b.root)
    frames = make_frames(rng, 3)
    for i in range(3):
        b.add_frame({k: v[i] for k, v in frames.items()}, task="dropped")
    b.clear_episode_buffer()
    assert b.episode_buffer_size == 0
    with pytest.raises(ValueError):
        b.save_episode()
    assert store_snapshot(b.root) == before
    check_dataset(b, model, "after clear_episode_buffer", items=False, episodes=False)


def test_add_frame_errors(tmp_path):
    rng = np.random.default_rng(4)
    ds = new_store(tmp_path / "s")
    frame = {k: v[0] for k, v in make_frames(rng, 1).items()}
    with pytest.raises(ValueError):
        ds.save_episode()  # empty buffer
    with pytest.raises(ValueError):
        ds.add_frame(frame)  # no task
    with pytest.raises(SchemaMismatchError):
        ds.add_frame({**frame, "nope": 1.0}, task="t")
    with pytest.raises(SchemaMismatchError):
        ds.add_frame({**frame, "index": 3}, task="t")
    with pytest.raises(SchemaMismatchError):
        ds.add_frame({**frame, "action": np.zeros(13, np.float32)}, task="t")
    assert ds.episode_buffer_size == 0
    before = store_snapshot(ds.root)
    ds.add_frame(frame, task="t")
    ds.add_frame({k: v for k, v in frame.items() if k != "action"}, task="t")  # a frame lacking a feature
    with pytest.raises(SchemaMismatchError):
        ds.save_episode()
    assert store_snapshot(ds.root) == before


# ------------------------------------------------------------------------------------------------ 3. validation


def _bad_episodes(rng):
    good = make_frames(rng, 4)

    def with_(**changes):
        out = dict(good)
        for k, v in changes.items():
            k = k.replace("__", ".")
            if v is None:
                out.pop(k)
            else:
                out[k] = v
        return out

    img = good[CAM]
    return {
        "missing feature": (with_(action=None), SchemaMismatchError),
        "unknown feature": ({**good, "observation.other": np.zeros((4, 2))}, SchemaMismatchError),
        "wrong shape": (with_(action=np.zeros((4, 13), np.float32)), SchemaMismatchError),
        "wrong 2-D shape": (with_(observation__grid=np.zeros((4, 3, 2))), SchemaMismatchError),
        "wrong image shape": (with_(observation__images__cam=img[:, :, :7]), SchemaMismatchError),
        "different lengths": (with_(action=good["action"][:3]), SchemaMismatchError),
        "zero frames": ({k: v[:0] for k, v in good.items()}, SchemaMismatchError),
        "strings": (with_(action=np.array([["a"] * 14] * 4)), SchemaMismatchError),
        "float into int64": (with_(observation__counter=np.zeros(4)), SchemaMismatchError),
        "float image > 1": (with_(observation__images__cam=img / 200.0), SchemaMismatchError),
        "float image < 0": (with_(observation__images__cam=img / 255.0 - 0.5), SchemaMismatchError),
        "uint16 image": (with_(observation__images__cam=img.astype(np.uint16)), SchemaMismatchError),
        "writer-filled index": ({**good, "index": np.arange(4)}, SchemaMismatchError),
        "writer-filled frame_index": ({**good, "frame_index": np.arange(4)}, SchemaMismatchError),
        "writer-filled episode_index": ({**good, "episode_index": np.zeros(4, np.int64)}, SchemaMismatchError),
        "writer-filled task_index": ({**good, "task_index": np.zeros(4, np.int64)}, SchemaMismatchError),
        "timestamp of wrong length": ({**good, "timestamp": np.zeros(3, np.float32)}, SchemaMismatchError),
    }


def test_add_episode_validation_writes_nothing(tmp_path):
    rng = np.random.default_rng(5)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(4, 6))
    before = store_snapshot(ds.root)
    for what, (frames, exc) in _bad_episodes(rng).items():
        with pytest.raises(exc):
            ds.add_episode(frames, task="t")
        assert store_snapshot(ds.root) == before, f"{what}: the store changed"
    good = make_frames(rng, 4)
    for task in ("", ["t"] * 3, ["t", "t", "", "t"], ["t", "t", 3, "t"], None, 3):  # a string or one per frame
        with pytest.raises((ValueError, TypeError)):
            ds.add_episode(good, task=task)
        assert store_snapshot(ds.root) == before, f"task {task!r}: the store changed"
    check_dataset(ds, model, "after refused appends")
    assert ds.add_episode(good, task="t") == model.add(good, "t")  # the writer still works
    check_dataset(ds, model, "after a good append")


def test_float_image_with_nan_is_refused(tmp_path):
    """A NaN pixel is not in [0, 1]: it must be refused like any other out-of-range float image, not silently
    stored as 0."""
    rng = np.random.default_rng(6)
    ds = new_store(tmp_path / "s")
    frames = make_frames(rng, 3)
    img = frames[CAM].astype(np.float32) / 255
    img[1, 2, 3, 0] = np.nan
    frames[CAM] = img
    before = store_snapshot(ds.root)
    with pytest.raises(SchemaMismatchError):
        ds.add_episode(frames, task="t")
    assert store_snapshot(ds.root) == before


@pytest.mark.parametrize("features, exc", [
    ({"cam": {"dtype": "video", "shape": [6, 8, 2]}}, SchemaMismatchError),  # neither HWC nor CHW
    ({"cam": {"dtype": "image", "shape": [6, 8, 1], "info": {"is_depth_map": True, "depth_unit": "cm"}}},
     SchemaMismatchError),
    ({"label": {"dtype": "string", "shape": [2]}}, SchemaMismatchError),  # a str per frame: shape [1]
    ({"x": {"dtype": "notadtype", "shape": [2]}}, UnsupportedDtypeError),
    ({"x": {"dtype": "float32", "shape": [0]}}, SchemaMismatchError),
    ({"x": {"dtype": "float32", "shape": [3, -1]}}, SchemaMismatchError),
    ({"cam": {"dtype": "image", "shape": [6, 8]}}, SchemaMismatchError),
    ({"x": {"dtype": "float32"}}, SchemaMismatchError),
    ({"x": "float32"}, SchemaMismatchError),
    ({"index": {"dtype": "float32", "shape": [1]}}, SchemaMismatchError),
    ({"frame_index": {"dtype": "int64", "shape": [2]}}, SchemaMismatchError),
    ({"a/b": {"dtype": "float32", "shape": [2]}}, UnsupportedStoreError),
], ids=["video-2-channels", "depth-image-bad-unit", "string", "unknown-dtype", "zero-dim", "negative-dim", "image-2d",
        "no-shape", "not-a-dict", "index-float", "frame_index-shape", "bad-name"])
def test_create_validation(tmp_path, features, exc):
    root = tmp_path / "store"
    with pytest.raises(exc):
        lz.create(root, fps=FPS, features=features)
    assert not (root / "zarr.json").exists()


def test_create_refuses_bad_arguments_and_non_empty_folders(tmp_path):
    with pytest.raises(ValueError):
        lz.create(tmp_path / "a", fps=0, features=FEATURES)
    with pytest.raises(ValueError):
        lz.create(tmp_path / "b", fps=FPS, features=FEATURES, capacity_frames=0)
    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(StoreError):
        lz.create(folder, fps=FPS, features=FEATURES)
    assert sorted(p.name for p in folder.iterdir() if p.name != ".lock") == ["notes.txt"]
    assert (folder / "notes.txt").read_text() == "mine"
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(StoreError):
        lz.create(afile, fps=FPS, features=FEATURES)
    # an existing (unlocked) store is not overwritten
    ds = new_store(tmp_path / "store")
    ds.add_episode(make_frames(np.random.default_rng(0), 3), task="t")
    ds.close()
    before = store_snapshot(tmp_path / "store")
    with pytest.raises(StoreError):
        lz.create(tmp_path / "store", fps=FPS, features=FEATURES)
    assert store_snapshot(tmp_path / "store") == before


# ------------------------------------------------------------------------------------------------ 4. images


def test_images_chw_and_float_are_accepted(tmp_path):
    rng = np.random.default_rng(7)
    ds, model = new_store(tmp_path / "s"), Model()
    # CHW uint8 (as LeRobot's cameras give them)
    frames = make_frames(rng, 5)
    chw = dict(frames, **{CAM: np.ascontiguousarray(np.moveaxis(frames[CAM], -1, 1))})
    assert chw[CAM].shape == (5, 3, 6, 8)
    ds.add_episode(chw, task="chw")
    model.add(frames, "chw")
    # HWC float32 and CHW float64 in [0, 1]: stored as round(x * 255)
    for dtype, layout in [(np.float32, "hwc"), (np.float64, "chw")]:
        frames = make_frames(rng, 4)
        x = rng.random((4, 6, 8, 3)).astype(dtype)
        x[0, 0, 0] = [0.0, 1.0, 0.5]
        stored = np.round(x.astype(np.float64) * 255).astype(np.uint8)
        given = x if layout == "hwc" else np.moveaxis(x, -1, 1)
        ds.add_episode(dict(frames, **{CAM: given}), task=f"{dtype.__name__} {layout}")
        model.add(dict(frames, **{CAM: stored}), f"{dtype.__name__} {layout}")
    # add_frame with a CHW float frame
    frames = make_frames(rng, 2)
    x = rng.random((2, 3, 6, 8))
    for i in range(2):
        ds.add_frame({**{k: v[i] for k, v in frames.items()}, CAM: x[i]}, task="frame")
    ds.save_episode()
    model.add(dict(frames, **{CAM: np.round(np.moveaxis(x, 1, -1) * 255).astype(np.uint8)}), "frame")
    check_dataset(ds, model, "images in other layouts")
    # LeRobot's float32 CHW output format of the reader
    reader = lz.open_dataset(ds.root, image_format="float32_chw")
    got = reader[model.lengths()[0]][CAM]  # first frame of episode 1
    assert got.dtype == np.float32 and got.shape == (3, 6, 8)
    assert np.array_equal(got, np.moveaxis(model.episodes[1][CAM][0], -1, 0).astype(np.float32) / np.float32(255))


# ------------------------------------------------------------------------------------------------ 5. random ops


def _pick_episode(raw: int, n: int) -> int:
    """A valid episode index in [-n, n) (negative ones included)."""
    return raw % (2 * n) - n


def _apply(op, ds, model, rng, counter):
    """Apply one drawn operation to the store and the model; return a description (None if not applicable)."""
    kind = op[0]
    n_ep = len(model.episodes)
    if kind == "add":
        _, n, variant = op
        frames = make_frames(rng, n)
        if variant == 0:
            task = TASKS[0]
        elif variant == 1:
            task = TASKS[int(rng.integers(len(TASKS)))]
        elif variant == 2:
            task = [TASKS[int(i)] for i in rng.integers(len(TASKS), size=n)]
            task[-1] = f"new task {counter}"
        else:
            task = f"new task {counter}"
        assert ds.add_episode(frames, task=task) == model.add(frames, task)
        return f"add_episode({n} frames, task={task!r})"
    if kind == "reopen":
        ds.close()
        with pytest.raises(StoreError):
            ds.add_episode(make_frames(rng, 1), task="x")
        return "reopen"
    if not n_ep:
        return None
    if kind == "delete_episodes":
        eps = [_pick_episode(r, n_ep) for r in op[1]]
        ds.delete_episodes(eps if len(eps) > 1 else eps[0])
        model.delete_episodes(eps)
        return f"delete_episodes({eps})"
    if kind == "set_task":
        eps = [_pick_episode(r, n_ep) for r in op[1]]
        task = op[2] if op[2] != "new" else f"new task {counter}"
        ds.set_task(eps if len(eps) > 1 else eps[0], task)
        model.set_task(eps, task)
        return f"set_task({eps}, {task!r})"
    e = _pick_episode(op[1], n_ep)
    length = model.lengths()[e]
    if kind == "delete_frames_range":
        _, _, a, b, form = op
        if form == "range":
            a, b = abs(a), abs(b)
            frames = range(a, b)
        else:
            frames = slice(a, b) if form == "slice" else (a, b)
        ids = list(range(length))[slice(a, b)]
        if not (-length <= a <= length and -length <= b <= length):
            with pytest.raises(FrameIndexError):
                ds.delete_frames(e, frames)
            return f"delete_frames({e}, {frames!r}) refused"
        ds.delete_frames(e, frames)
        model.delete_frames(e, ids)
        return f"delete_frames({e}, {frames!r})"
    if kind == "delete_frames_list":
        ids = [r % (2 * length) - length for r in op[2]]
        ds.delete_frames(e, ids)
        model.delete_frames(e, ids)
        return f"delete_frames({e}, {ids})"
    if kind == "edit":
        _, _, a, b, form = op
        if form == "none":
            frames, (first, stop) = None, (0, length)
        else:
            if form == "range":
                a, b = abs(a), abs(b)
            frames = {"slice": slice(a, b), "tuple": (a, b), "range": range(a, b)}[form]
            if not (-length <= a <= length and -length <= b <= length):
                with pytest.raises(FrameIndexError):
                    ds.edit(e, frames=frames).__enter__()
                return f"edit({e}, {frames!r}) refused"
            first, stop, _ = slice(a, b).indices(length)
        m = max(stop - first, 0)
        names = [k for k in FEATURES if rng.random() < 0.7] or ["action"]
        new = {k: v for k, v in make_frames(rng, m).items() if k in names}
        subset = rng.random() < 0.5  # edit(features=...) maps only those
        with ds.edit(e, frames=frames, **({"features": names} if subset else {})) as ep:
            assert set(ep) == (set(names) if subset else set(FEATURES)), sorted(ep)
            for k, v in new.items():
                assert ep[k].shape == v.shape, (k, ep[k].shape, v.shape)
                ep[k][...] = v
        model.edit(e, first, stop, new)
        flush = rng.random() < 0.5
        if flush:
            ds.flush()
        return f"edit({e}, {frames!r}, {names}{', features' if subset else ''}){'+flush' if flush else ''}"
    raise AssertionError(kind)


_ep = st.integers(0, 1000)
OPS = st.one_of(
    st.tuples(st.just("add"), st.integers(1, 12), st.integers(0, 3)),
    st.tuples(st.just("delete_episodes"), st.lists(_ep, min_size=1, max_size=3)),
    st.tuples(st.just("delete_frames_range"), _ep, st.integers(-14, 14), st.integers(-14, 14),
              st.sampled_from(["slice", "tuple", "range"])),
    st.tuples(st.just("delete_frames_list"), _ep, st.lists(st.integers(0, 1000), min_size=1, max_size=6)),
    st.tuples(st.just("edit"), _ep, st.integers(-14, 14), st.integers(-14, 14),
              st.sampled_from(["slice", "tuple", "range", "none"])),
    st.tuples(st.just("set_task"), st.lists(_ep, min_size=1, max_size=3), st.sampled_from([*TASKS, "new"])),
    st.tuples(st.just("reopen")),
)


# no shrinking: it can take minutes on a failure, and the failure message already lists every operation applied
@settings(max_examples=25, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(initial=st.lists(st.integers(1, 10), min_size=1, max_size=4), ops=st.lists(OPS, min_size=1, max_size=12),
       capacity=st.one_of(st.none(), st.none(), st.integers(15, 50)), seed=st.integers(0, 2**32 - 1))
def test_random_operations_match_the_reference(tmp_path, initial, ops, capacity, seed):
    """Random sequences of appends (ring buffer or not), deletes, frame deletes, edits, set_task and reopens,
    checked after every step: frames, LeRobot invariants and committed stats."""
    rng = np.random.default_rng(seed)
    root = Path(tempfile.mkdtemp(dir=tmp_path)) / "store"
    ds, model = filled_store(root, rng, lengths=initial, capacity_frames=capacity)
    history = [f"capacity {capacity}, initial episodes {initial}"]
    stale = False  # edits whose stats are committed at the next commit (flush, close or any other change)
    try:
        check_dataset(ds, model, "initial", items=False, fresh=False)
        for step, op in enumerate(ops):
            generation = read_state(root).generation
            done = _apply(op, ds, model, rng, step)
            if done is None:
                continue
            history.append(done)
            event(done.split("(")[0])
            if done == "reopen":
                ds = lz.open_dataset(root, mode="r+")
                assert isinstance(ds, WritableDataset)
                ds.durable = False
            if done.startswith("edit") and not done.endswith(("+flush", "refused")):
                stale = True
            elif read_state(root).generation != generation:
                stale = False
            check_dataset(ds, model, " -> ".join(history), items=step % 3 == 0, stats=not stale)
        ds.close()  # commits pending edits
        check_dataset(lz.open_dataset(root), model, " -> ".join([*history, "close"]), items=False, fresh=False)
        check_on_disk(root, model, " -> ".join(history))
    finally:
        ds.close()


# ------------------------------------------------------------------------------------------------ 6. ring buffer


def test_ring_buffer_drops_oldest_whole_episodes(tmp_path):
    rng = np.random.default_rng(8)
    capacity = 40
    root = tmp_path / "ring"
    ds, model = new_store(root, capacity_frames=capacity), Model(capacity=capacity)
    assert ds.capacity_frames == capacity
    for step, n in enumerate([10, 15, 12, 3, 40, 1, 7, 20, 20, 5, 39, 2]):
        frames = make_frames(rng, n)
        task = TASKS[step % 3]
        assert ds.add_episode(frames, task=task) == model.add(frames, task)
        assert len(ds) <= capacity
        check_dataset(ds, model, f"ring step {step} (+{n} frames)", items=step % 4 == 0, fresh=step % 4 == 0)
        if step == 5:  # also works after edits and deletes, and across a reopen
            ds.delete_frames(0, [0])
            model.delete_frames(0, [0])
            ds.close()
            ds = lz.open_dataset(root, mode="r+")
            ds.durable = False
            assert ds.capacity_frames == capacity
            check_dataset(ds, model, "ring reopened")
    check_on_disk(root, model, "ring buffer", first_task=True)
    before = store_snapshot(root)
    with pytest.raises(ValueError):
        ds.add_episode(make_frames(rng, capacity + 1), task="too long")
    assert store_snapshot(root) == before
    check_dataset(ds, model, "after a refused oversized episode")


def _metadata_sizes(root: Path) -> tuple[int, int, int]:
    doc = json.loads((root / "zarr.json").read_bytes())
    attrs = doc["attributes"]["lerobot_zarr"]
    grid = doc["consolidated_metadata"]["metadata"]["action"]["chunk_grid"]["configuration"]["chunk_shapes"][0]
    retired = len(json.dumps(attrs.get("retired", []), separators=(",", ":")))
    return (root / "zarr.json").stat().st_size, retired, len(grid)


def test_ring_buffer_metadata_stays_bounded(tmp_path, monkeypatch):
    rng = np.random.default_rng(9)
    features = {"action": FEATURES["action"]}
    capacity = 30
    ds = new_store(tmp_path / "ring", features=features, capacity_frames=capacity)
    model = Model(features=features, capacity=capacity)
    sizes = {}
    for i in range(200):
        frames = make_frames(rng, 3, features)
        ds.add_episode(frames, task="t")
        model.add(frames, "t")
        if i + 1 in (100, 200):
            sizes[i + 1] = _metadata_sizes(ds.root)
    check_dataset(ds, model, "after 200 appends", items=False)
    total, _, grid = sizes[200]
    assert grid <= capacity // 3 + 2, f"the chunk grid lists {grid} edges: retired chunks are not run-length encoded"
    # apart from the time-bounded list of recently retired chunks, the root does not grow with the appends
    assert abs((sizes[200][0] - sizes[200][1]) - (sizes[100][0] - sizes[100][1])) < 300, sizes
    assert total < 64 * 1024, sizes
    # once retired chunks expire, the list and the .retired files go too
    monkeypatch.setattr(transaction_module, "RETIRE_AFTER_S", 0.0)
    for _ in range(3):
        frames = make_frames(rng, 3, features)
        ds.add_episode(frames, task="t")
        model.add(frames, "t")
    total2, retired2, _ = _metadata_sizes(ds.root)
    assert retired2 < 100, retired2
    assert total2 - retired2 < sizes[200][0] - sizes[200][1] + 400, (total2, retired2, sizes)
    leftovers = {p.name for p in (ds.root / ".retired").rglob("*") if p.is_file()}
    assert len(leftovers) <= 1, f"chunks {sorted(leftovers)} left under .retired/ (only the last dropped one may stay)"
    check_dataset(ds, model, "after expiry", items=False)


# ------------------------------------------------------------------------------------------------ 7. readers


READER_SCRIPT = r"""
import json, sys
import numpy as np
import lerobot_zarr as lz
root, episode = sys.argv[1], int(sys.argv[2])
ds = lz.open_dataset(root)
frames = np.array(ds.episode_frames(episode))
mapped = ds.episode(episode)
keys = ["action", "observation.images.cam", "observation.counter"]

def hexes(d):
    return {k: np.ascontiguousarray(np.asarray(d[k])).tobytes().hex() for k in keys}

def snapshot():
    return {"batch": hexes(ds.get_batch(frames)), "item": hexes(ds[int(frames[0])]), "mapped": hexes(mapped),
            "len": len(ds)}

print(json.dumps(snapshot()), flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "read":
        print(json.dumps(snapshot()), flush=True)
    elif cmd == "all":
        b = ds.get_batch(np.arange(len(ds)))
        print(json.dumps({"all": hexes(b), "task": b["task"]}), flush=True)
    elif cmd == "refresh":
        print(json.dumps(ds.refresh()), flush=True)
    else:
        break
"""


def _ask(proc: subprocess.Popen, cmd: str | None = None):
    if cmd is not None:
        proc.stdin.write(cmd + "\n")
        proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"reader process died: {proc.stderr.read()}")
    return json.loads(line)


def _hex(a: np.ndarray) -> str:
    return np.ascontiguousarray(a).tobytes().hex()


def test_edits_are_visible_to_a_reader_in_another_process(tmp_path):
    rng = np.random.default_rng(10)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(6, 9, 4))
    keys = ["action", CAM, "observation.counter"]
    proc = popen_py(READER_SCRIPT, ds.root, 1)
    try:
        first = _ask(proc)
        ep1 = model.episodes[1]
        for view in ("batch", "mapped"):
            assert first[view] == {k: _hex(ep1[k]) for k in keys}, view
        assert first["item"] == {k: _hex(ep1[k][0]) for k in keys}
        new = {k: v for k, v in make_frames(rng, 5).items() if k in keys}
        with ds.edit(1, frames=slice(0, 5)) as ep:
            for k, v in new.items():
                ep[k][:] = v
        model.edit(1, 0, 5, new)
        after = _ask(proc, "read")  # no reopen, no refresh
        for view in ("batch", "mapped"):
            assert after[view] == {k: _hex(ep1[k]) for k in keys}, f"{view}: the reader does not see the edit"
        assert after["item"] == {k: _hex(ep1[k][0]) for k in keys}
        check_dataset(ds, model, "after the edit (stats not committed yet)", stats=False)
        ds.flush()
        check_dataset(ds, model, "after the edit and flush()")
        # an old-commit reader in another process keeps reading deleted episodes until it refreshes
        old = copy.deepcopy(model)
        ds.delete_episodes([0])
        model.delete_episodes([0])
        got = _ask(proc, "all")
        want = old.expected()
        assert got["all"] == {k: _hex(want[k]) for k in keys} and got["task"] == want["task"]
        assert _ask(proc, "refresh") is True
        got = _ask(proc, "all")
        want = model.expected()
        assert got["all"] == {k: _hex(want[k]) for k in keys} and got["task"] == want["task"]
        assert _ask(proc, "refresh") is False
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_reader_of_an_older_commit_keeps_its_data_until_refresh(tmp_path):
    rng = np.random.default_rng(11)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(5, 8, 3, 6, 4))
    reader = lz.open_dataset(ds.root)  # nothing mapped yet: it must find deleted chunks under .retired/
    old = copy.deepcopy(model)
    ds.delete_episodes([0, 2])
    model.delete_episodes([0, 2])
    ds.delete_frames(1, slice(1, 3))  # rewrites the episodes from 1 on under new chunk ids
    model.delete_frames(1, [1, 2])
    ds.add_episode(f := make_frames(rng, 7), task="later")
    model.add(f, "later")
    assert any((ds.root / ".retired").rglob("*")), "deleted chunks are kept under .retired/"
    check_dataset(reader, old, "reader of the older commit", fresh=False, stats=False)
    assert_stats(reader.meta.stats, old, "the older commit's stats")
    assert reader.refresh() is True
    check_dataset(reader, model, "reader after refresh", fresh=False)
    assert reader.refresh() is False
    check_dataset(ds, model, "writer")


def test_reader_of_an_expired_commit_gets_a_clear_error(tmp_path, monkeypatch):
    """Once retired packs expire (RETIRE_AFTER_S), a reader still on the old commit that touches a deleted
    episode of a retired pack for the first time gets a StoreError telling it to reopen, never another episode's
    data."""
    rng = np.random.default_rng(27)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(20, 8, 3))  # episode 0 alone in pack 0
    assert read_state(ds.root).table.chunk.tolist() == [0, 1, 1]
    monkeypatch.setattr(transaction_module, "RETIRE_AFTER_S", 0.0)
    reader = lz.open_dataset(ds.root)
    first = reader[20]  # maps pack 1 only
    ds.delete_episodes([0])
    model.delete_episodes([0])
    ds.add_episode(f := make_frames(rng, 4), task="t")  # a second commit expires the retired chunk
    model.add(f, "t")
    assert not any(p.is_file() for p in (ds.root / ".retired").rglob("*") if p.name == "0")
    with pytest.raises(StoreError):
        reader[0]
    assert_columns(reader[20], first, "a mapped episode stays readable")
    assert reader.refresh() is True
    check_dataset(reader, model, "after refresh", fresh=False)


def test_set_task_with_a_new_task_keeps_older_readers_working(tmp_path):
    """set_task changes frames in place (documented): a reader of the previous commit sees the new task at once
    and must not crash on a task_index its older task list lacks (task lists only grow: it learns the text)."""
    rng = np.random.default_rng(12)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(4, 5))
    reader = lz.open_dataset(ds.root)
    old = copy.deepcopy(model)
    ds.set_task(0, "a task nobody had")
    model.set_task([0], "a task nobody had")
    check_dataset(ds, model, "writer after set_task")
    assert old.expected()["task"][0] != "a task nobody had"
    assert reader[0]["task"] == "a task nobody had"
    batch = lz.open_dataset(ds.root).get_batch(np.arange(3))
    assert reader.get_batch(np.arange(3))["task"] == batch["task"]
    assert reader.refresh() is True and reader[0]["task"] == "a task nobody had"


def test_set_task_reaches_readers_of_older_commits_at_once(tmp_path):
    """set_task is an in-place change like edit (documented): a reader of the previous commit sees the new task
    of existing tasks at once, without refresh(), and its indices stay those of its commit."""
    rng = np.random.default_rng(13)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(4, 5))
    reader = lz.open_dataset(ds.root)
    old_task = reader[0]["task"]
    other = next(t for t in model.tasks if t != old_task)
    ds.set_task(0, other)
    model.set_task([0], other)
    check_dataset(ds, model, "writer after set_task")
    assert reader[0]["task"] == other, "set_task's in-place change did not reach a reader of the previous commit"
    assert len(reader) == len(lz.open_dataset(ds.root))
    assert reader.refresh() is True and reader[0]["task"] == other


def test_a_failed_commit_leaves_the_store_at_its_last_commit(tmp_path, monkeypatch):
    """A writer dying at the commit point (simulated: the commit raises) leaves the last commit in place, for
    every structural change; a new writer then cleans up and works."""
    rng = np.random.default_rng(14)
    root = tmp_path / "s"
    ds, model = filled_store(root, rng, lengths=(4, 6, 5), capacity_frames=18)
    real = transaction_module.commit

    def crash(*args, **kwargs):
        raise RuntimeError("simulated crash at the commit point")

    monkeypatch.setattr(transaction_module, "commit", crash)
    for what, op in [("add_episode", lambda: ds.add_episode(make_frames(rng, 3), task="t")),
                     ("add_episode dropping the oldest", lambda: ds.add_episode(make_frames(rng, 5), task="t")),
                     ("delete_episodes", lambda: ds.delete_episodes([0])),
                     ("delete_frames", lambda: ds.delete_frames(0, [1, 2])),
                     ("set_task to a new task", lambda: ds.set_task([0, 2], "never committed"))]:
        with pytest.raises(RuntimeError):
            op()
        reader = lz.open_dataset(root)
        assert_columns(reader.get_batch(np.arange(len(reader))), model.expected(), f"after a failed {what}")
        assert_stats(reader.meta.stats, model, f"after a failed {what}")
        check_dataset(ds, model, f"the writer after a failed {what}", items=False, episodes=False, fresh=False)
    monkeypatch.setattr(transaction_module, "commit", real)
    ds.close()
    ds = lz.open_dataset(root, mode="r+")
    packs = read_state(root).packs
    live = {k for k in range(len(packs)) if packs.rows[k] > 0}
    for name in read_state(root).arrays:  # the packs of uncommitted appends were cleaned up
        assert {int(p.name) for p in (root / name / "c").iterdir()} == live, name
    check_dataset(ds, model, "reopened after the failed commits")
    ds.add_episode(f := make_frames(rng, 2), task="t")
    model.add(f, "t")
    check_dataset(ds, model, "appended after the failed commits")
    ds.close()


def test_zarr_readers_keep_reading_the_committed_table_after_a_failed_commit(tmp_path, monkeypatch):
    """store.py: the episode_* arrays are a copy of the COMMITTED episode table for zarr/xarray readers. A writer
    dying at the commit point (simulated: the commit raises) must not leave them describing a table that was
    never committed (zarr then cannot even read them against the committed metadata)."""
    rng = np.random.default_rng(32)
    root = tmp_path / "s"
    ds, model = filled_store(root, rng, lengths=(4, 6))

    def crash(*args, **kwargs):
        raise RuntimeError("simulated crash at the commit point")

    monkeypatch.setattr(transaction_module, "commit", crash)
    with pytest.raises(RuntimeError):
        ds.add_episode(make_frames(rng, 5), task="t")
    check_on_disk(root, model, "zarr read after a failed append")


def test_edit_stats_are_committed_at_flush_close_or_the_next_change(tmp_path):
    rng = np.random.default_rng(29)
    root = tmp_path / "s"
    ds, model = filled_store(root, rng, lengths=(5, 7, 4, 6))
    new = make_frames(rng, 3)
    with ds.edit(0, frames=(1, 4)) as ep:
        for k, v in new.items():
            ep[k][:] = v
    model.edit(0, 1, 4, new)
    check_dataset(ds, model, "edited, not flushed", stats=False)
    ds.flush()
    check_dataset(ds, model, "after flush()")
    generation = read_state(root).generation
    ds.flush()  # nothing pending: no commit
    assert read_state(root).generation == generation
    # only the features asked for are mapped; LeRobot's own columns and unknown names are refused
    with ds.edit(1, features=["action", CAM]) as ep:
        assert set(ep) == {"action", CAM}
        ep["action"][:] = -1.0
        ep[CAM][:, 0, 0] = 255
    model.episodes[1]["action"][:] = -1.0
    model.episodes[1][CAM][:, 0, 0] = 255
    ds.close()  # commits the pending stats
    check_dataset(lz.open_dataset(root), model, "after close()", fresh=False)
    ds = lz.open_dataset(root, mode="r+")
    before = store_snapshot(root)
    for bad in (["index"], ["timestamp"], ["task_index"], ["nope"], ["action", "frame_index"]):
        with pytest.raises(ValueError), ds.edit(2, features=bad):
            pass
        assert store_snapshot(root) == before, bad
    with ds.edit(2, features=["observation.grid"]) as ep:
        ep["observation.grid"][-1] = 0.25
    model.episodes[2]["observation.grid"][-1] = 0.25
    ds.add_episode(f := make_frames(rng, 3), task="t")  # any other change commits the edit's stats too
    model.add(f, "t")
    check_dataset(ds, model, "after the next commit")
    ds.close()



@pytest.mark.parametrize("change", ["delete_frames", "delete_episodes"])
def test_edit_stats_survive_the_compaction_that_moves_the_edited_episode(tmp_path, change):
    """An episode edited in place (stats not committed yet) whose pack a later deletion compacts is moved with
    its edited values: the commit must count those values, not the stats from before the edit."""
    rng = np.random.default_rng(31)
    root = tmp_path / "s"
    ds, model = filled_store(root, rng, lengths=(2, 3, 6, 10, 10))  # the last episode starts pack 1
    new = {k: v * 4 - 3 if v.dtype.kind == "f" else v for k, v in make_frames(rng, 3).items()}
    with ds.edit(1) as ep:  # episode 1 shares pack 0 with every other episode
        for k, v in new.items():
            ep[k][:] = v
    model.edit(1, 0, 3, new)
    pack = int(read_state(root).table.chunk[1])
    assert pack == 0 and len(read_state(root).packs) == 2
    if change == "delete_frames":  # episode 3 moves out of pack 0, leaving it mostly dead: 0, 1 and 2 move too
        ds.delete_frames(3, [7])
        model.delete_frames(3, [7])
    else:
        ds.delete_episodes([3])
        model.delete_episodes([3])
    assert int(read_state(root).table.chunk[1]) != pack, "the edited episode was not moved: the test misses its case"
    check_dataset(ds, model, f"edit, then {change} compacting its pack")
    ds.close()
    check_dataset(lz.open_dataset(root), model, f"edit, then {change}, reopened", fresh=False)

KILLED_EDIT_SCRIPT = r"""
import os, sys
import lerobot_zarr as lz
ds = lz.open_dataset(sys.argv[1], mode="r+")
with ds.edit(1, frames=(1, 4), features=["action"]) as ep:
    ep["action"][:] = 42.0
    os._exit(3)  # killed in the middle of the edit: no flush, no close
"""

KILLED_SET_TASK_SCRIPT = r"""
import os, sys
import lerobot_zarr as lz
import lerobot_zarr.writing.transaction as w
ds = lz.open_dataset(sys.argv[1], mode="r+")
real, calls = w.commit, []

def commit_then_die(*args, **kwargs):
    calls.append(1)
    if len(calls) == int(sys.argv[3]):
        os._exit(3)  # killed at this commit point
    return real(*args, **kwargs)

w.commit = commit_then_die
ds.set_task([0, 2], sys.argv[2])
os._exit(4)
"""


def test_a_writer_killed_during_an_edit(tmp_path):
    """The edit's bytes stay (edits are not atomic), and the next writer recomputes and commits the episode's
    stats when it opens."""
    rng = np.random.default_rng(30)
    root = tmp_path / "s"
    ds, model = filled_store(root, rng, lengths=(5, 7, 4))
    ds.close()
    result = run_py(KILLED_EDIT_SCRIPT, root)
    assert result.returncode == 3, result.stderr
    model.edit(1, 1, 4, {"action": np.full((3, 14), 42.0, np.float32)})
    check_dataset(lz.open_dataset(root), model, "after the killed edit (not flushed)", stats=False, fresh=False)
    ds = lz.open_dataset(root, mode="r+")
    check_dataset(ds, model, "next writer")
    ds.close()


@pytest.mark.parametrize("die_at", [1, 2], ids=["first-commit", "second-commit"])
def test_a_writer_killed_during_set_task(tmp_path, die_at):
    """Killed at the first commit: nothing changed. Killed at the second: the next writer finishes the task
    change when it opens."""
    rng = np.random.default_rng(31)
    root = tmp_path / "s"
    ds, model = filled_store(root, rng, lengths=(5, 7, 4))
    ds.close()
    result = run_py(KILLED_SET_TASK_SCRIPT, root, "a brand new task", die_at)
    assert result.returncode == 3, result.stderr
    reader = lz.open_dataset(root)
    if die_at == 1:
        check_dataset(reader, model, "killed at the first commit", fresh=False)
    else:
        assert reader.meta.tasks == [*model.tasks, "a brand new task"]
        model.set_task([0, 2], "a brand new task")
    ds = lz.open_dataset(root, mode="r+")
    check_dataset(ds, model, "next writer")
    check_on_disk(root, model, "next writer", first_task=True)
    ds.close()


# ------------------------------------------------------------------------------------------------ 8. two writers


TRY_WRITE_SCRIPT = r"""
import sys
import lerobot_zarr as lz
root, how = sys.argv[1], sys.argv[2]
try:
    if how == "create":
        lz.create(root, fps=10, features={"action": {"dtype": "float32", "shape": [14]}})
    else:
        lz.open_dataset(root, mode="r+")
except Exception as exc:
    print(type(exc).__name__)
else:
    print("opened")
"""

HOLD_SCRIPT = r"""
import sys, time
import lerobot_zarr as lz
ds = lz.open_dataset(sys.argv[1], mode="r+")
print("locked", flush=True)
time.sleep(120)
"""


def test_second_writer_is_refused(tmp_path):
    rng = np.random.default_rng(15)
    root = tmp_path / "s"
    ds, model = filled_store(root, rng, lengths=(3, 4))
    with pytest.raises(StoreLockedError):
        lz.open_dataset(root, mode="r+")
    with pytest.raises(StoreLockedError):
        WritableDataset(root)
    assert run_py(TRY_WRITE_SCRIPT, root, "r+").stdout.strip() == "StoreLockedError"
    check_dataset(ds, model, "first writer still works", items=False)
    ds.add_episode(f := make_frames(rng, 2), task="t")
    model.add(f, "t")
    ds.close()
    assert ds.closed
    again = lz.open_dataset(root, mode="r+")  # released by close()
    check_dataset(again, model, "second writer after close", items=False)
    again.close()
    with WritableDataset(root) as third:
        assert run_py(TRY_WRITE_SCRIPT, root, "r+").stdout.strip() == "StoreLockedError"
        assert not third.closed
    assert third.closed
    assert run_py(TRY_WRITE_SCRIPT, root, "r+").stdout.strip() == "opened"


def test_second_create_on_a_locked_store_raises_store_locked_error(tmp_path):
    """create() is a second writer too: while a writer holds the store, it gets StoreLockedError (not a
    StoreError claiming the folder 'is not a lerobot_zarr store')."""
    ds = new_store(tmp_path / "s")
    with pytest.raises(StoreLockedError):
        lz.create(ds.root, fps=FPS, features=FEATURES)
    assert run_py(TRY_WRITE_SCRIPT, ds.root, "create").stdout.strip() == "StoreLockedError"


def test_lock_of_a_killed_writer_is_released(tmp_path):
    rng = np.random.default_rng(16)
    root = tmp_path / "s"
    ds, model = filled_store(root, rng, lengths=(3, 4))
    ds.close()
    holder = popen_py(HOLD_SCRIPT, root)
    try:
        assert holder.stdout.readline().strip() == "locked", holder.stderr.read()
        with pytest.raises(StoreLockedError):
            lz.open_dataset(root, mode="r+")
        assert run_py(TRY_WRITE_SCRIPT, root, "r+").stdout.strip() == "StoreLockedError"
    finally:
        holder.kill()
        holder.wait(timeout=30)
    ds = lz.open_dataset(root, mode="r+")
    check_dataset(ds, model, "after the holder was killed", items=False)
    ds.add_episode(f := make_frames(rng, 2), task="t")
    model.add(f, "t")
    check_dataset(ds, model, "appended after the kill", items=False)
    ds.close()


# ------------------------------------------------------------------------------------------------ 9. disk guard


def test_disk_space_guard(tmp_path, monkeypatch):
    rng = np.random.default_rng(17)
    root = tmp_path / "s"
    too_much = shutil.disk_usage(tmp_path).free + 2**40
    ds = new_store(root, min_free_bytes=too_much)
    model = Model()
    frames = make_frames(rng, 5)
    before = store_snapshot(root)
    with pytest.raises(DiskSpaceError) as info:
        ds.add_episode(frames, task="t")
    assert isinstance(info.value, OSError)
    assert str(root) in str(info.value), str(info.value)
    assert store_snapshot(root) == before
    check_dataset(ds, model, "nothing committed", items=False)
    ds.close()
    ds = WritableDataset(root, min_free_bytes=0, durable=False)
    ds.add_episode(frames, task="t")
    model.add(frames, "t")
    ds.add_episode(f := make_frames(rng, 4), task="t")
    model.add(f, "t")
    check_dataset(ds, model, "same append with min_free_bytes=0")
    ds.close()
    # the environment variable sets the margin for writers opened without min_free_bytes (open_dataset r+)
    monkeypatch.setenv(transaction_module.MIN_FREE_ENV, str(too_much))
    ds = lz.open_dataset(root, mode="r+")
    before = store_snapshot(root)
    with pytest.raises(DiskSpaceError):
        ds.add_episode(make_frames(rng, 3), task="t")
    with pytest.raises(DiskSpaceError):
        ds.delete_frames(0, [0])
    assert store_snapshot(root) == before
    ds.close()
    monkeypatch.setenv(transaction_module.MIN_FREE_ENV, "0")
    ds = lz.open_dataset(root, mode="r+")
    ds.delete_frames(0, [0])
    model.delete_frames(0, [0])
    check_dataset(ds, model, "delete_frames with margin 0")
    ds.close()


# ------------------------------------------------------------------------------------------------ 10. pickling


def test_pickled_writer_is_a_plain_reader(tmp_path):
    rng = np.random.default_rng(18)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(4, 7, 3, 5))
    ds.delete_episodes([1])  # shifted episode_index / index values
    model.delete_episodes([1])
    copy_ = pickle.loads(pickle.dumps(ds))
    assert type(copy_) is LeRobotZarrDataset and not isinstance(copy_, WritableDataset)
    assert not hasattr(copy_, "add_episode")
    check_dataset(copy_, model, "unpickled", fresh=False)
    ds.close()
    # the copy holds no lock
    with lz.open_dataset(ds.root, mode="r+") as again:
        assert isinstance(again, WritableDataset) and not again.closed, "a new writer could not take the lock"
        check_dataset(copy_, model, "unpickled, while a new writer holds the lock", fresh=False, items=False)


def test_the_writer_composes_a_reader_that_follows_its_commits(tmp_path):
    """Issue 22: a WritableDataset is not a LeRobotZarrDataset subclass; it samples through ``reader`` (which has
    headroom for appends and reloads each commit) and offers the reader's public API as its own."""
    rng = np.random.default_rng(33)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(4, 6))
    reader = ds.reader
    assert type(reader) is LeRobotZarrDataset and not isinstance(ds, LeRobotZarrDataset)
    ds.add_episode(f := make_frames(rng, 5), task="t")
    model.add(f, "t")
    assert ds.reader is reader and len(reader) == len(ds) == 15 and reader.meta.total_episodes == 3
    assert ds.meta is reader.meta and ds.episode_frames(2) == reader.episode_frames(2)
    check_dataset(ds, model, "sampled through the reader", items=False)
    with pytest.raises(AttributeError) as info:
        ds.no_such_thing  # noqa: B018
    assert "read-only" not in str(info.value) and "WritableDataset" in str(info.value)
    with pytest.raises(AttributeError):
        ds._sel  # noqa: B018  (the reader's private state is not the writer's)
    from lerobot_zarr.writing.export import to_lerobot

    exported = lz.open_dataset(to_lerobot(ds, tmp_path / "out", progress=False), root=tmp_path / "again",
                               progress=False)
    assert len(exported) == len(ds) and exported.meta.total_episodes == 3  # the export functions take a writer too
    ds.close()
    later = LeRobotZarrDataset(tmp_path / "s")
    later.reload(read_state(tmp_path / "s"))
    assert len(later) == 15
    for bad in (-1.0, float("inf"), "1"):
        with pytest.raises(ArgumentError, match="headroom"):
            LeRobotZarrDataset(tmp_path / "s", headroom=bad)


# ------------------------------------------------------------------------------------------------ 11. transcoded


def _parquet_model(folder: Path, features: dict) -> Model:
    """The reference for a LeRobot folder, read with pyarrow (not through the library)."""
    tasks_table = pq.read_table(folder / "meta" / "tasks.parquet").to_pydict()
    task_col = "task" if "task" in tasks_table else "__index_level_0__"
    tasks = [t for _, t in sorted(zip(tasks_table["task_index"], tasks_table[task_col]))]
    cols: dict[str, list] = {}
    for file in sorted((folder / "data").rglob("*.parquet")):
        t = pq.read_table(file, columns=[*features, "timestamp", "episode_index", "task_index", "index"])
        for name in t.column_names:
            cols.setdefault(name, []).extend(t.column(name).to_pylist())
    order = np.argsort(cols["index"], kind="stable")
    model = Model(features=features, fps=json.loads((folder / "meta" / "info.json").read_text())["fps"])
    model.tasks = list(tasks)
    ep = np.asarray(cols["episode_index"])[order]
    for e in np.unique(ep).tolist():
        rows = order[ep == e]
        episode = {k: np.array([cols[k][r] for r in rows], dtype=np_dtype(ft)) for k, ft in features.items()}
        episode["timestamp"] = np.array([cols["timestamp"][r] for r in rows], dtype=np.float32)
        episode["task"] = [tasks[cols["task_index"][r]] for r in rows]
        model.episodes.append(episode)
    return model


def test_read_write_on_a_transcoded_store(tmp_path):
    src = (SHARED_DATASETS / "record-test").resolve()
    if not (src / "meta" / "info.json").is_file():
        pytest.skip(f"real LeRobot dataset 'record-test' not found at {src} (../shared/datasets)")
    folder = tmp_path / "record-test"
    shutil.copytree(src, folder)
    store = tmp_path / "store"
    ds = lz.open_dataset(folder, root=store, mode="r+", progress=False)
    assert isinstance(ds, WritableDataset)
    ds.durable = False
    user = {k: ds.features[k] for k in ds.array_specs if k not in DEFAULTS}
    assert set(user) == {"action", "observation.state"}
    for k, spec in ds.array_specs.items():
        if k in user:
            assert spec.frame_shape == frame_shape(user[k]) and spec.dtype == np_dtype(user[k])
    model = _parquet_model(folder, user)
    assert len(model.episodes) == 4
    check_dataset(ds, model, "transcoded, opened r+", stats=False, exact_timestamps=False, items=False)
    rng = np.random.default_rng(19)
    ds.delete_episodes([1])
    model.delete_episodes([1])
    assert ds.meta.source["kind"] == "edited" and ds.meta.source["from"]["kind"] == "local"
    new = {k: v for k, v in make_frames(rng, 10, user).items()}
    with ds.edit(0, frames=(100, 110)) as ep:
        assert set(ep) == set(user)
        for k, v in new.items():
            ep[k][:] = v
    model.edit(0, 100, 110, new)
    frames = {k: make_frames(rng, 25, {k: {"dtype": str(s.dtype), "shape": list(s.frame_shape) or [1]}})[k]
              for k, s in ds.array_specs.items() if k in user}
    assert ds.add_episode(frames, task="Put it back") == model.add(frames, "Put it back") == 3
    ds.delete_frames(-2, slice(0, 30))
    model.delete_frames(-2, list(range(30)))
    check_dataset(ds, model, "transcoded, edited", exact_timestamps=False)
    check_on_disk(store, model, "transcoded, edited", first_task=True)
    ds.close()
    again = lz.open_dataset(folder, root=store, progress=False)  # reading: the edited store, not a re-transcode
    assert type(again) is LeRobotZarrDataset and again.meta.source["kind"] == "edited"
    check_dataset(again, model, "reopened from the folder", exact_timestamps=False, items=False)


# ------------------------------------------------------------------------------------------------ 12. round trip


TOKEN = "hf_write"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    from hub_fixtures import running_server

    from lerobot_zarr.testing.hub_server import HubServer

    yield from running_server(HubServer(tmp_path_factory.mktemp("writer_hub") / "storage",
                                        tokens={TOKEN: "alice"}))


@pytest.fixture
def env(monkeypatch, tmp_path, hub):
    from hub_fixtures import server_env

    yield from server_env(monkeypatch, tmp_path, hub)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A recorded store with images, a 2-D and a scalar feature, several tasks, deletions (shifted indices)
    and an edit, exported with to_lerobot."""
    base = tmp_path_factory.mktemp("recorded")
    rng = np.random.default_rng(20)
    ds, model = filled_store(base / "store", rng, lengths=(6, 11, 4, 9, 7))
    ds.delete_episodes([0])
    model.delete_episodes([0])
    ds.delete_frames(2, [0, -1])
    model.delete_frames(2, [0, -1])
    with ds.edit(1, frames=(1, 3)) as ep:
        ep["action"][:] = 7.5
    model.edit(1, 1, 3, {"action": np.full((2, 14), 7.5, np.float32)})
    ds.set_task(0, "relabelled")
    model.set_task([0], "relabelled")
    ds.close()
    export = Path(ds.to_lerobot(base / "export", progress=False))
    return ds, model, export


def test_export_round_trip(recorded, tmp_path):
    ds, model, export = recorded
    check_dataset(ds, model, "recorded store")
    info = json.loads((export / "meta" / "info.json").read_text())
    assert info["total_episodes"] == len(model.episodes) and info["total_frames"] == sum(model.lengths())
    back = lz.open_dataset(export, root=tmp_path / "store2", progress=False)
    check_dataset(back, model, "store from the export", stats=False)
    assert_stats(json.loads((export / "meta" / "stats.json").read_text()), model, "export's stats.json")


def test_push_round_trip(recorded, hub, env, tmp_path):
    ds, model, _ = recorded
    sha = ds.push("alice/recorded", token=TOKEN, progress=False)
    assert isinstance(sha, str) and len(sha) == 40
    back = lz.open_dataset("alice/recorded", token=TOKEN, root=tmp_path / "hub_store", progress=False)
    assert back.meta.source.get("commit") == sha
    check_dataset(back, model, "store from the Hub", stats=False)


def test_lerobot_loads_the_export_of_a_recorded_store(recorded):
    pytest.importorskip("lerobot", reason="lerobot is not installed here: LeRobotDataset compatibility of a "
                                          "recorded store's export was not checked")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    _, model, export = recorded
    theirs = LeRobotDataset(repo_id="local/recorded", root=export)
    exp = model.expected()
    n = len(exp["index"])
    assert len(theirs) == n and theirs.num_episodes == len(model.episodes)
    for i in range(n):
        item = theirs[i]
        for k in [*FEATURES, *DEFAULTS]:
            x = item[k].numpy() if hasattr(item[k], "numpy") else np.asarray(item[k])
            if k == CAM:
                want = np.moveaxis(exp[k][i], -1, 0).astype(np.float32) / np.float32(255)
                assert x.dtype == np.float32 and x.shape == want.shape, (k, x.dtype, x.shape)
                np.testing.assert_allclose(x, want, atol=1e-6, err_msg=f"frame {i} {k}")
            else:
                assert np.array_equal(x.reshape(-1), exp[k][i].reshape(-1).astype(x.dtype)), f"frame {i} {k}"
        assert item["task"] == exp["task"][i], i


# ------------------------------------------------------------------------------------------------ 13. edges


def test_operations_after_close_raise_store_error(tmp_path):
    rng = np.random.default_rng(21)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(4, 5))
    frame = {k: v[0] for k, v in make_frames(rng, 1).items()}
    ds.add_frame(frame, task="t")
    ds.close()
    assert ds.closed
    ds.close()  # twice is fine
    before = store_snapshot(ds.root)
    ops = {
        "add_episode": lambda: ds.add_episode(make_frames(rng, 2), task="t"),
        "add_frame": lambda: ds.add_frame(frame, task="t"),
        "save_episode": lambda: ds.save_episode(),
        "delete_episodes": lambda: ds.delete_episodes([0]),
        "delete_frames": lambda: ds.delete_frames(0, [0]),
        "set_task": lambda: ds.set_task(0, "x"),
    }
    for what, op in ops.items():
        with pytest.raises(StoreError):
            op()
        assert store_snapshot(ds.root) == before, what
    with pytest.raises(StoreError), ds.edit(0) as ep:
        ep["action"][:] = 0
    assert store_snapshot(ds.root) == before
    check_dataset(ds, model, "closed writer still reads")


def test_episode_indices_edges(tmp_path):
    rng = np.random.default_rng(22)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(4, 5, 6, 3, 7))
    n = len(model.episodes)
    before = store_snapshot(ds.root)
    bad = {
        "edit past the end": lambda: ds.edit(n).__enter__(),
        "edit before the start": lambda: ds.edit(-n - 1).__enter__(),
        "delete_episodes past the end": lambda: ds.delete_episodes([0, n]),
        "delete_episodes negative out of range": lambda: ds.delete_episodes(-n - 1),
        "delete_frames past the end": lambda: ds.delete_frames(n, [0]),
        "delete_frames of a frame past the episode": lambda: ds.delete_frames(0, [4]),
        "delete_frames of a frame before the episode": lambda: ds.delete_frames(0, [-5]),
        "set_task past the end": lambda: ds.set_task([n], TASKS[0]),
    }
    for what, op in bad.items():
        with pytest.raises(FrameIndexError):
            op()
        assert store_snapshot(ds.root) == before, what
    with pytest.raises(ValueError):
        ds.delete_frames(0, range(0, 4, 2))
    with pytest.raises(ValueError):
        ds.edit(0, frames=slice(0, 4, 2)).__enter__()
    assert store_snapshot(ds.root) == before
    # empty selections change nothing
    ds.delete_episodes([])
    ds.delete_frames(1, slice(3, 3))
    ds.delete_frames(1, np.array([], dtype=np.int64))
    assert store_snapshot(ds.root) == before
    # negative episode indices count from the end
    ds.delete_frames(-1, [-1, 0])
    model.delete_frames(-1, [-1, 0])
    new = {"action": np.ones((2, 14), np.float32)}
    with ds.edit(-2, frames=(-2, None)) as ep:
        ep["action"][:] = new["action"]
    model.edit(-2, model.lengths()[-2] - 2, model.lengths()[-2], new)
    ds.set_task(-3, "last but two")
    model.set_task([-3], "last but two")
    ds.delete_episodes(-4)
    model.delete_episodes([-4])
    check_dataset(ds, model, "negative indices")
    # deleting every frame deletes the episode (a slice, a list with negatives and duplicates)
    ds.delete_frames(0, slice(None))
    model.delete_frames(0, list(range(model.lengths()[0])))
    length = model.lengths()[1]
    ids = [*range(-length, 0), 0]
    ds.delete_frames(1, ids)
    model.delete_frames(1, ids)
    check_dataset(ds, model, "episodes deleted by deleting their frames")
    # edit of an episode deleted during the edit
    n = len(model.episodes)
    try:  # an error at the end of the block or none: either way the episode stays deleted, nothing else changes
        with ds.edit(n - 1) as ep:
            ds.delete_episodes([n - 1])
            ep["action"][:] = 123
    except StoreError:
        pass
    model.delete_episodes([n - 1])
    check_dataset(ds, model, "episode deleted during its edit")
    check_on_disk(ds.root, model, "edges")
    with pytest.raises(FrameIndexError):  # and the deleted episode's index is gone
        ds.edit(n - 1).__enter__()
    ds.close()


def test_delete_frames_with_an_empty_list_is_a_no_op(tmp_path):
    """An empty list of frame indices selects no frame: nothing to delete (like an empty slice), not a
    TypeError."""
    rng = np.random.default_rng(23)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(4, 5))
    before = store_snapshot(ds.root)
    ds.delete_frames(0, [])
    assert store_snapshot(ds.root) == before
    check_dataset(ds, model, "after delete_frames(0, [])", items=False)


def test_edit_checks_the_shape_of_assigned_values(tmp_path):
    """A value of the wrong shape raises SchemaMismatchError naming the feature and episode (not numpy's broadcast
    ValueError) and writes nothing; a scalar feature takes (T, 1) values in edits as add_episode does."""
    rng = np.random.default_rng(31)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(5, 4))
    with ds.edit(0) as ep:
        for what, assign in {
            "slice": lambda: ep["action"].__setitem__(slice(None), np.zeros((5, 13), "f4")),
            "whole": lambda: ep.__setitem__("action", np.zeros((4, 14), "f4")),
            "in place": lambda: ep["action"].__iadd__(np.ones((5, 13), "f4")),
            "scalar": lambda: ep["observation.counter"].__setitem__(slice(None), np.zeros((5, 2), np.int64)),
        }.items():
            with pytest.raises(SchemaMismatchError, match=r"feature '.*', episode 0") as info:
                assign()
            assert info.value.feature in ("action", "observation.counter") and info.value.episode == 0, what
    ds.flush()
    check_dataset(ds, model, "after refused edits", items=False)
    counter = np.arange(100, 105, dtype=np.int64)[:, None]  # (T, 1), as add_episode takes it
    frames = make_frames(rng, 5)
    frames["observation.counter"] = counter
    assert ds.add_episode(frames, task=TASKS[0]) == model.add(frames, TASKS[0])
    with ds.edit(1) as ep:
        ep["observation.counter"][:] = counter[:4]
        ep["observation.counter"][1] = np.array([7])
        ep["observation.counter"] += np.ones((4, 1), np.int64)
    model.edit(1, 0, 4, {"observation.counter": np.array([101, 8, 103, 104])})
    with ds.edit(2, frames=(1, 3)) as ep:
        ep["observation.counter"] = counter[:2]
    model.edit(2, 1, 3, {"observation.counter": counter[:2, 0]})
    ds.flush()
    check_dataset(ds, model, "scalar edits of (T, 1) values")
    ds.close()


def test_frame_ranges_outside_the_episode_are_refused(tmp_path):
    """Bounds of a frame range outside [-length, length] raise FrameIndexError naming the episode (they used to be
    clamped: an edit of nothing, or delete_frames(0, slice(0, 10)) deleting a 5-frame episode); nothing changes."""
    rng = np.random.default_rng(32)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(5, 4))
    before = store_snapshot(ds.root)
    for frames in (slice(5, 50), slice(0, 10), (6, None), range(6), slice(-6, None), (None, -6)):
        with pytest.raises(FrameIndexError, match="episode 0") as info:
            ds.edit(0, frames=frames).__enter__()
        assert info.value.episode == 0
        with pytest.raises(FrameIndexError, match="episode 0") as info:
            ds.delete_frames(0, frames)
        assert info.value.episode == 0, frames
    assert store_snapshot(ds.root) == before
    check_dataset(ds, model, "after refused frame ranges", items=False)
    # bounds inside [-length, length] (None: the end) still work, negative ones from the end
    with ds.edit(0, frames=slice(5, None)) as ep:
        assert len(ep["action"]) == 0
    ds.delete_frames(0, (-5, 1))
    model.delete_frames(0, [0])
    ds.delete_frames(1, slice(None, 4))
    model.delete_frames(1, [0, 1, 2, 3])
    check_dataset(ds, model, "in-range frame deletes")
    ds.close()
    for frames in (slice(0, 50), (4, 5), slice(-5, None)):
        with pytest.raises(FrameIndexError, match="episode 0"):
            LeRobotZarrDataset(ds.root, episodes={0: frames})
    assert len(LeRobotZarrDataset(ds.root, episodes={0: slice(-4, None)})) == 4


def test_edit_views_end_with_their_block(tmp_path):
    """Frames looked up in an edit block cannot be written (or read) after it: StoreClosedError, nothing changes,
    and flush() folds nothing into the stats."""
    rng = np.random.default_rng(33)
    ds, model = filled_store(tmp_path / "s", rng, lengths=(5, 4))
    with ds.edit(0) as ep:
        counter, action = ep["observation.counter"], ep["action"]
    for what, op in {
        "write": lambda: counter.__setitem__(slice(None), 200),
        "in place": lambda: action.__iadd__(1),
        "whole feature": lambda: ep.__setitem__("action", 0),
        "new lookup": lambda: ep["observation.state"],
        "read": lambda: counter[0],
    }.items():
        with pytest.raises(StoreClosedError, match="edit block .*ended") as info:
            op()
        assert info.value.episode == 0, what
    assert "ended" in repr(counter)
    ds.flush()
    check_dataset(ds, model, "after writes to ended edit views")
    ds.close()
