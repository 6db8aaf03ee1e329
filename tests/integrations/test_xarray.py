"""Analysis views and distributed work: ``to_xarray``, ``lerobot_stats``, the plain zarr view of a store, transcoding on
a dask cluster, and splitting episodes across ranks.

References are independent of the code under test wherever that is possible: ``ds.get_batch`` over all frames and
``ds.episode(e)`` (the library's sampling paths, which do not go through dask), pyarrow reads of the real datasets'
parquet files, the frames a test wrote itself into a writer store, LeRobot's own ``meta/stats.json`` and
``meta/episodes`` statistics, and byte-for-byte comparison of stores.

One ``LocalCluster`` (2 worker processes, 1 thread each) serves the whole module. Its workers are spawned processes
that may import this module (for the helpers run on them), so nothing here runs at import time but definitions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hub_fixtures import real_dataset, resolve_prefix, row_groups, server_env

import lerobot_zarr  # noqa: F401  (sets zarr's rectilinear-chunks switch for xr.open_zarr)
from lerobot_zarr import ArgumentError, CorruptSourceError, create, episodes_for_rank, open_dataset, split_episodes
from lerobot_zarr.doctor import read_report
from lerobot_zarr.integrations.xarray import lerobot_stats
from lerobot_zarr.store.state import read_root, read_state
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

xr = pytest.importorskip("xarray")
pytest.importorskip("dask")

pytestmark = pytest.mark.filterwarnings("ignore:.*is left out of samples:UserWarning")

REPO = Path(__file__).resolve().parents[2]
REAL = ["record-test", "open_50", "G1-policy-train"]
EPS32 = float(np.finfo(np.float32).eps)
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
HIST_BINS = 5000  # LeRobot's RunningQuantileStats(num_quantile_bins=5000)
INDEX_COORDS = ("episode_index", "frame_index", "index")  # in memory, from the episode table
TOP = "observation.images.top"
WRIST = "observation.images.wrist"
GRID = "observation.grid"
DEAD_ENDPOINT = "http://127.0.0.1:9"  # the discard port: connections are refused


# ================================================================================================ helpers


def assert_bits(actual, expected, what: str) -> None:
    """Same dtype, shape and bytes (NaNs included)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    if actual.tobytes() != expected.tobytes():
        a, b = actual.reshape(-1), expected.reshape(-1)
        bad = np.flatnonzero(a != b)
        raise AssertionError(f"{what}: {len(bad)} of {a.size} values differ, first at flat positions "
                             f"{bad[:3].tolist()}: {a[bad[:3]]!r} != {b[bad[:3]]!r}")


def read_info(src: Path) -> dict:
    return json.loads((src / "meta" / "info.json").read_text())


def numeric_features(info: dict) -> list[str]:
    return [k for k, f in info["features"].items() if f["dtype"] not in ("image", "video", "string")]


def read_parquet_frames(src: Path, names: list[str]) -> dict[str, np.ndarray]:
    """Columns of the source's data files with pyarrow alone, in global ``index`` order, as the info dtypes."""
    info = read_info(src)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in names}
    index: list[np.ndarray] = []
    for path in sorted((src / "data").glob("*/*.parquet")):
        table = pq.read_table(path, columns=list(dict.fromkeys([*names, "index"])))
        index.append(table.column("index").to_numpy())
        for k in names:
            col = table.column(k).combine_chunks()
            shape = info["features"][k]["shape"]
            if pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type) or pa.types.is_large_list(col.type):
                values = col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), -1)
            else:
                values = col.to_numpy(zero_copy_only=False)
                values = values.reshape(len(col), *([] if shape == [1] else [-1]))
            parts[k].append(values.astype(info["features"][k]["dtype"], copy=False))
    order = np.argsort(np.concatenate(index), kind="stable")
    return {k: np.concatenate(v)[order] for k, v in parts.items()}


def check_to_xarray(ds, what: str):
    """to_xarray of a dataset that selects whole, materialized episodes, against ``get_batch`` over all its frames
    and ``episode(e)``: every variable over ``frame`` (data and coordinates), dims, dask chunks, the episode table.
    Returns the xarray Dataset."""
    x = ds.to_xarray()
    meta = ds.meta
    sel = ds.episodes[meta.materialized_episodes[ds.episodes]]
    lengths = meta.episode_length[sel]
    n = int(lengths.sum())
    assert len(ds) == n, f"{what}: check_to_xarray wants a dataset of whole materialized episodes"
    assert x.sizes["frame"] == n, what
    over_frame = {k for k, v in x.variables.items() if v.dims and v.dims[0] == "frame"}
    assert over_frame == set(ds.array_specs), f"{what}: variables over frame {sorted(over_frame)}"
    batch = ds.get_batch(np.arange(n))
    values = {}
    for name, spec in ds.array_specs.items():
        var = x[name]
        assert var.dims[0] == "frame" and len(var.dims) == 1 + len(spec.frame_shape), f"{what}: {name} {var.dims}"
        assert all(d.startswith(f"{name}.") for d in var.dims[1:]), f"{what}: {name} dims {var.dims}"
        assert var.shape == (n, *spec.frame_shape) and var.dtype == spec.dtype, f"{what}: {name}"
        if name in INDEX_COORDS:
            assert name in x.coords and not var.chunks, f"{what}: {name} must be an in-memory coordinate"
        else:
            # one dask chunk per episode, whole along the other axes
            assert var.chunks == (tuple(lengths.tolist()), *((s,) for s in spec.frame_shape)), \
                f"{what}: chunks of {name}: {var.chunks}"
        assert (name in x.coords) == (name in (*INDEX_COORDS, "timestamp")), f"{what}: {name} coord or data var"
        values[name] = var.values
        assert_bits(values[name], batch[name], f"{what}: to_xarray {name} vs get_batch")
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for k, e in enumerate(sel.tolist()):
        episode = ds.episode(e)
        for name in ds.array_specs:
            assert_bits(values[name][starts[k]:starts[k + 1]], np.asarray(episode[name]),
                        f"{what}: to_xarray {name} of episode {e} vs ds.episode")
    local = np.concatenate([np.arange(m) for m in lengths]) if n else np.zeros(0, np.int64)
    assert_bits(x["episode_index"].values, np.repeat(sel, lengths).astype(np.int64), f"{what}: episode_index")
    assert_bits(x["frame_index"].values, local.astype(np.int64), f"{what}: frame_index")
    assert_bits(x["index"].values, (np.repeat(meta.episode_start[sel], lengths) + local).astype(np.int64),
                f"{what}: index")
    # the episode table over dim "episode": every episode, materialized or not
    assert x.sizes["episode"] == meta.total_episodes
    assert_bits(x["episode"].values, np.arange(meta.total_episodes), f"{what}: episode coordinate")
    for key, want in (("episode_start", meta.episode_start), ("episode_end", meta.episode_end),
                      ("episode_length", meta.episode_length), ("episode_materialized", meta.materialized_episodes)):
        np.testing.assert_array_equal(x[key].values, want, err_msg=f"{what}: {key}")
        assert x[key].dims == ("episode",)
    tasks = [meta.tasks[t] if t >= 0 else "" for t in np.asarray(x["episode_task_index"].values).tolist()]
    assert list(x["episode_task"].values) == tasks, what
    # LeRobot names of 1-D features that list one label per element become the labels of that axis
    for name, spec in ds.array_specs.items():
        names = meta.features[name].get("names")
        if isinstance(names, list) and len(names) == 1 and isinstance(names[0], list):
            names = names[0]
        if isinstance(names, dict) and len(names) == 1:
            (axis, names), = names.items()
            assert x[name].dims[1] == f"{name}.{axis}", f"{what}: axis of {name} named from names {{{axis!r}: ...}}"
        if len(spec.frame_shape) == 1 and isinstance(names, list) and len(names) == spec.frame_shape[0]:
            dim = x[name].dims[1]
            assert dim in x.coords, f"{what}: labels of {name} are not a coordinate"
            assert list(x.coords[dim].values) == [str(s) for s in names], f"{what}: labels of {name}"
    return x


# -------------------------------------------------------------------------------------------- store comparison


def store_files(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in Path(root).rglob("*") if p.is_file() and p.name != ".lock"}


def assert_same_store(got: Path, want: Path, what: str, *, same_source: bool = True) -> None:
    """Bit-identical stores: the same files, every one byte-equal except the root ``zarr.json``, whose attributes
    are equal but for ``generation`` (how many commits it took) and, with ``same_source=False``, ``source``; and
    the dataset doctor's files (written as episodes were checked, in another order), the same report."""
    a, b = store_files(got), store_files(want)
    assert sorted(a) == sorted(b), f"{what}: files differ: only in got {sorted(set(a) - set(b))[:5]}, only in " \
                                   f"want {sorted(set(b) - set(a))[:5]}"
    da, db = read_report(got), read_report(want)
    assert (da is None) == (db is None) and (da is None or (da.checked, da.defects) == (db.checked, db.defects)), \
        f"{what}: the doctor's reports differ: {da!r} vs {db!r}"
    differ = [rel for rel in b if rel != "zarr.json" and not rel.startswith(".doctor/")
              and a[rel].read_bytes() != b[rel].read_bytes()]
    assert differ == [], f"{what}: {len(differ)} files differ, e.g. {differ[:5]}"
    ra, rb = read_root(got), read_root(want)
    attrs_a, attrs_b = ra["attributes"].pop("lerobot_zarr"), rb["attributes"].pop("lerobot_zarr")
    drop = {"generation"} | (set() if same_source else {"source"})
    for attrs in (attrs_a, attrs_b):  # the root's own hash covers generation and source too
        attrs.get("hashes", {}).pop("root", None)
    assert {k: v for k, v in attrs_a.items() if k not in drop} == {k: v for k, v in attrs_b.items() if k not in drop}, \
        f"{what}: root attributes differ"
    assert ra == rb, f"{what}: root zarr.json (consolidated metadata) differs"


def chunk_files(root: Path, episodes) -> dict[str, bytes]:
    """Bytes of the given episodes' rows in their pack files (every array), keyed by path and episode."""
    state = read_state(root)
    out = {}
    for e in episodes:
        pack, offset, n = int(state.table.chunk[e]), int(state.table.offset[e]), int(state.table.length[e])
        for name, spec in state.arrays.items():
            rel = f"{name}/c/{pack}" + "/0" * len(spec.frame_shape)
            out[f"{rel}#{e}"] = (root / rel).read_bytes()[offset * spec.frame_bytes:(offset + n) * spec.frame_bytes]
    return out


# ================================================================================================ fixtures


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("analysis_sources")
    return {
        # 8 episodes over 3 data files, an image feature and a 2-D feature
        "gen": write_sample_dataset(base / "gen", n_episodes=8, episodes_per_file=3, lengths=(20, 40),
                                    image_keys=(TOP,), image_shape=(8, 10, 3), extra_nd=True, seed=3),
        # 16 episodes of 100-200 frames, 4 per data file (one row group each), 2 x 64 float32 per frame
        "ranks": write_sample_dataset(base / "ranks", n_episodes=16, episodes_per_file=4, lengths=(100, 200),
                                      state_dim=64, action_dim=64, seed=5),
    }


@pytest.fixture(scope="module")
def video_source(tmp_path_factory) -> Path:
    """6 data files of 2 episodes, an image feature, a 2-D feature and a real AV1 mp4 camera (PyAV)."""
    pytest.importorskip("av", reason="writing and decoding mp4 cameras needs PyAV")
    return write_sample_dataset(tmp_path_factory.mktemp("video_source") / "video", n_episodes=12, episodes_per_file=2,
                                lengths=(30, 60), image_keys=(WRIST,), image_shape=(24, 32, 3), video_keys=(TOP,),
                                write_videos=True, extra_nd=True, seed=11)


@pytest.fixture(scope="module")
def hub(tmp_path_factory, sources):
    server = HubServer(tmp_path_factory.mktemp("analysis_hub"))
    shas = {key: server.add_repo(f"org/{key}", folder, tags=["v3.0"]) for key, folder in sources.items()}
    with server:
        yield server, shas
    assert server.errors == [], server.errors[0]


@pytest.fixture()
def env(monkeypatch, tmp_path, hub):
    yield from server_env(monkeypatch, tmp_path, hub[0])


class RealStores:
    """Each real dataset transcoded once per module (skipped when absent); G1-policy-train is the session's shared
    read-only store (its camera at 24x32: these tests read its numeric features)."""

    def __init__(self, base: Path, request):
        self.base, self.request, self.stores = base, request, {}

    def __call__(self, name: str):
        src = real_dataset(name)
        if name == "G1-policy-train" and name not in self.stores:
            self.stores[name] = open_dataset(self.request.getfixturevalue("g1_store"), progress=False)
        elif name not in self.stores:
            self.stores[name] = open_dataset(src, root=self.base / name, progress=False)
        return src, self.stores[name]


@pytest.fixture(scope="module")
def real_stores(module_tmp, request) -> RealStores:
    return RealStores(module_tmp, request)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """One LocalCluster for the module: 2 worker processes of 1 thread. Not the default dask scheduler of this
    process (set_as_default=False): to_xarray's lazy arrays are computed locally unless a test asks for it."""
    distributed = pytest.importorskip("distributed")
    work = tmp_path_factory.mktemp("dask")
    # HF_ENDPOINT: nothing listens there. The workers must get the test Hub's address from the pickled HubFiles,
    # and huggingface_hub's own requests (its agent-harness registry) fail at once instead of resolving hf.co.
    worker_env = {"HF_HOME": str(work / "hf_home"), "HF_ENDPOINT": DEAD_ENDPOINT, "HF_HUB_DISABLE_XET": "1",
                  "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PYTHONPATH": str(REPO)}
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       local_directory=str(work), env=worker_env)
    c = distributed.Client(cluster, set_as_default=False)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


# ================================================================================================ 1. to_xarray


@pytest.mark.parametrize("name", REAL)
def test_to_xarray_real_dataset_matches_store_and_parquet(real_stores, name):
    src, ds = real_stores(name)
    x = check_to_xarray(ds, name)
    info = read_info(src)
    numeric = numeric_features(info)
    ref = read_parquet_frames(src, numeric)
    for k in numeric:
        assert_bits(x[k].values, ref[k], f"{name}: to_xarray {k} vs pyarrow read of the source parquet")
    if name == "record-test":  # 6 joint names on action and state
        assert list(x.coords["action.dim_0"].values) == info["features"]["action"]["names"]
        assert len(x.coords["action.dim_0"]) == 6
    # the cameras whose videos are absent are left out (listed in attrs), not zero-filled
    videos = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    assert all(v not in x.variables for v in videos if v in ds.left_out)
    assert set(x.attrs["left_out"]) == set(ds.left_out)


def test_to_xarray_generated_image_and_2d_feature(sources, tmp_path):
    ds = open_dataset(sources["gen"], root=tmp_path / "store", progress=False)
    x = check_to_xarray(ds, "generated")
    assert x[TOP].dims == ("frame", f"{TOP}.height", f"{TOP}.width", f"{TOP}.channels")
    assert x[TOP].dtype == np.uint8 and x[TOP].attrs["lerobot_dtype"] == "image"
    assert x[GRID].dims == ("frame", f"{GRID}.dim_0", f"{GRID}.dim_1") and x[GRID].shape[1:] == (3, 4)
    assert len(x.chunks["frame"]) == ds.meta.total_episodes == 8
    # a selection of episodes gives exactly those, in episode order
    sub = open_dataset(tmp_path / "store", episodes=[6, 2], progress=False)
    xs = check_to_xarray(sub, "generated, episodes [2, 6]")
    assert np.unique(xs["episode_index"].values).tolist() == [2, 6]


def _writer_store(root: Path):
    """A store made by a writer: 6 episodes appended, episodes 0 and 2 deleted (later ones keep their chunk files,
    so their stored episode_index/index exceed LeRobot's by the table's shifts), then one more appended.
    Returns the writer and the LeRobot frames the store must now hold (built here, not by the library)."""
    features = {"observation.state": {"dtype": "float32", "shape": [3], "names": {"motors": ["a", "b", "c"]}},
                GRID: {"dtype": "float32", "shape": [2, 2]},
                "cam": {"dtype": "image", "shape": [4, 6, 3]}}
    rng = np.random.default_rng(7)
    w = create(root, fps=10, features=features, durable=False, pack_bytes=4 * 6 * 3 * 12)  # packs of 12 frames
    written = []

    def add(n: int, task: str) -> None:
        frames = {"observation.state": rng.normal(size=(n, 3)).astype(np.float32),
                  GRID: rng.normal(size=(n, 2, 2)).astype(np.float32),
                  "cam": rng.integers(0, 256, size=(n, 4, 6, 3), dtype=np.uint8)}
        w.add_episode(frames, task=task)
        written.append((frames, task))

    for n, task in zip((5, 7, 9, 11, 6, 8), ("pick", "place", "pick", "push", "place", "pick"), strict=True):
        add(n, task)
    w.delete_episodes([0, 2])
    del written[2], written[0]
    add(4, "push")
    expected = {k: np.concatenate([f[k] for f, _ in written]) for k in written[0][0]}
    lengths = [len(f["cam"]) for f, _ in written]
    tasks = list(w.meta.tasks)  # the store's task numbering: each frame's task_index must name its episode's task
    expected["task_index"] = np.repeat([tasks.index(t) for _, t in written], lengths).astype(np.int64)
    expected["episode_index"] = np.repeat(np.arange(len(written)), lengths).astype(np.int64)
    expected["frame_index"] = np.concatenate([np.arange(n) for n in lengths]).astype(np.int64)
    expected["index"] = np.arange(sum(lengths), dtype=np.int64)
    expected["timestamp"] = (expected["frame_index"] / 10).astype(np.float32)
    return w, expected, lengths, [t for _, t in written], tasks


def test_to_xarray_writer_store_after_deletions(tmp_path):
    w, expected, lengths, episode_tasks, _ = _writer_store(tmp_path / "w")
    shifts = read_state(tmp_path / "w").table
    assert shifts.episode_index_shift.any() and shifts.index_shift.any(), "the check needs shifted index columns"
    for ds, what in ((w, "writer"), (open_dataset(tmp_path / "w", progress=False), "reader")):
        x = check_to_xarray(ds, what)
        assert x.chunks["frame"] == tuple(lengths)
        for name, want in expected.items():
            assert_bits(x[name].values, want, f"{what}: {name} vs the frames written")
        assert list(x["episode_task"].values) == episode_tasks
        assert [x.attrs["tasks"][t] for t in x["task_index"].values[np.cumsum([0, *lengths[:-1]])]] == episode_tasks
        assert x["observation.state"].dims == ("frame", "observation.state.motors")
        assert list(x.coords["observation.state.motors"].values) == ["a", "b", "c"]
        # stats of LeRobot's values (index columns shifted back), as the writer's own stats.json has them (quantiles
        # aside: the writer's are numpy's linear ones, lerobot_stats' the inverse CDF LeRobot approximates)
        stats = lerobot_stats(x)
        assert stats["episode_index"]["max"] == [len(lengths) - 1] and stats["index"]["max"] == [sum(lengths) - 1]
        for feature, by_key in w.meta.stats.items():
            if feature == "cam":
                continue
            for key, want in by_key.items():
                if key.startswith("q"):
                    continue
                np.testing.assert_allclose(stats[feature][key], want, rtol=1e-9, atol=1e-12,
                                           err_msg=f"{what}: lerobot_stats {feature} {key} vs the writer's stats")
    w.close()


# ================================================================================================ 2. partial stores


def test_to_xarray_partial_hub_store_lists_only_materialized_episodes(env, sources, tmp_path):
    local = open_dataset(sources["gen"], root=tmp_path / "local", progress=False)
    ref = local.get_batch(np.arange(len(local)))
    ref_episode = ref["episode_index"]
    wanted = [1, 4, 6]
    ds = open_dataset("org/gen", episodes=wanted, progress=False)
    assert np.flatnonzero(ds.meta.materialized_episodes).tolist() == wanted
    store = Path(ds.root)

    def check(x, what: str) -> None:
        rows = np.isin(ref_episode, wanted)
        assert x.sizes["frame"] == int(rows.sum()) == int(local.meta.episode_length[wanted].sum()), what
        assert np.unique(x["episode_index"].values).tolist() == wanted, what
        assert np.flatnonzero(x["episode_materialized"].values).tolist() == wanted, what
        assert x.sizes["episode"] == 8 and list(x["episode_length"].values) == list(local.meta.episode_length)
        assert x.chunks["frame"] == tuple(local.meta.episode_length[wanted].tolist()), what
        for name in local.array_specs:  # nothing zero-filled: the materialized episodes' frames, bit for bit
            assert_bits(x[name].values, ref[name][rows], f"{what}: {name}")

    check(ds.to_xarray(), "episodes=[1, 4, 6] from the Hub")
    check_to_xarray(ds, "episodes=[1, 4, 6] from the Hub")
    # the store by path, lazily (selects all 8 episodes, 3 of them present): the same view, nothing fetched
    lazy = open_dataset(store, lazy=True, progress=False)
    assert list(lazy.episodes) == list(range(8))
    check(lazy.to_xarray(), "store opened lazily by path")
    assert np.flatnonzero(read_state(store).complete_episodes()).tolist() == wanted  # to_xarray fetched nothing


def test_to_xarray_lazy_hub_open_has_no_frames(env, sources):
    ds = open_dataset("org/gen", lazy=True, progress=False)
    x = ds.to_xarray()
    assert x.sizes["frame"] == 0 and x.sizes["episode"] == 8
    assert not x["episode_materialized"].values.any()
    assert x["observation.state"].shape == (0, 6) and x[TOP].shape == (0, 8, 10, 3)
    # a lazy fetch commits the episode; this dataset keeps the commit it opened until refresh()
    _ = ds[0]
    assert ds.to_xarray().sizes["frame"] == 0  # the view of the commit the dataset opened
    assert ds.refresh()
    x = ds.to_xarray()
    assert np.flatnonzero(x["episode_materialized"].values).tolist() == [0]
    assert x.sizes["frame"] == int(ds.meta.episode_length[0])


def test_lerobot_stats_of_a_store_without_frames(env):
    x = open_dataset("org/gen", lazy=True, progress=False).to_xarray()
    assert lerobot_stats(x) == {}


# ================================================================================================ 3. zarr view


def _check_open_zarr(root: Path, ds, what: str) -> None:
    """xr.open_zarr of a complete store gives the arrays to_xarray gives (and the episode table)."""
    x = ds.to_xarray()
    z = xr.open_zarr(root, consolidated=True)
    assert z.sizes["frame"] == x.sizes["frame"], what
    for name, spec in ds.array_specs.items():
        assert z[name].dims == ("frame", *(f"{name}.{d}" for d in spec.dims)), f"{what}: zarr dims of {name}"
        packs = read_state(root).packs.rows
        assert z[name].chunks[0] == tuple(packs.tolist()), f"{what}: zarr chunks of {name} are not the packs"
        assert_bits(z[name].values, x[name].values, f"{what}: xr.open_zarr {name} vs to_xarray")
    for key in ("episode_start", "episode_end", "episode_length", "episode_task_index"):
        assert_bits(z[key].values, x[key].values, f"{what}: {key}")
    np.testing.assert_array_equal(z["episode_chunk"].values, read_state(root).table.chunk)


@pytest.mark.parametrize("name", REAL)
def test_open_zarr_equals_to_xarray_real(real_stores, name):
    _, ds = real_stores(name)
    _check_open_zarr(Path(ds.root), ds, name)


def test_open_zarr_equals_to_xarray_generated(sources, video_source, tmp_path):
    for key, src in (("gen", sources["gen"]), ("video", video_source)):
        ds = open_dataset(src, root=tmp_path / key, progress=False)
        _check_open_zarr(tmp_path / key, ds, key)


def test_open_zarr_writer_store_marks_live_rows(tmp_path):
    """The store docstring: feature arrays span every pack id; a pack holds its episodes' frames as stored
    (episode_index/index still exceed LeRobot's by the shifts) at their offsets, ``frame_live`` marks exactly the
    rows of live episodes, and a retired pack is a single filler row (fill value 0, no file, not live)."""
    root = tmp_path / "w"
    w, expected, lengths, _, _ = _writer_store(root)
    w.close()
    state = read_state(root)
    table, packs = state.table, state.packs
    assert packs.rows.tolist() == [12, 0, 12, 12, 12], "12-frame packs: 5+7 | 9 (deleted) | 11 | 6 | 8+4"
    assert table.chunk.tolist() == [0, 2, 3, 4, 4] and table.offset.tolist() == [5, 0, 0, 0, 8]
    z = xr.open_zarr(root, consolidated=True)
    sizes = np.maximum(packs.rows, 1)
    assert z.sizes["frame"] == int(sizes.sum())
    stored = dict(expected)
    stored["episode_index"] = expected["episode_index"] + np.repeat(table.episode_index_shift, lengths)
    stored["index"] = expected["index"] + np.repeat(table.index_shift, lengths)
    first = (np.cumsum(sizes) - sizes)[table.chunk] + table.offset
    assert z["episode_frame"].values.tolist() == first.tolist()
    rows = np.concatenate([np.arange(f, f + n) for f, n in zip(first, lengths, strict=True)])
    assert "frame_live" in z.coords and np.flatnonzero(z["frame_live"].values).tolist() == sorted(rows.tolist())
    for name in state.arrays:
        assert z[name].chunks[0] == tuple(sizes.tolist()), f"zarr chunks of {name}"
        assert_bits(z[name].values[rows], stored[name], f"zarr view of {name}")
        assert not z[name].values[int((np.cumsum(sizes) - sizes)[1])].any(), "a retired pack reads as fill value"
    assert z["episode_chunk"].values.tolist() == table.chunk.tolist()
    live_only = z.isel(frame=z["frame_live"].values)  # what the docstring tells zarr users to do
    assert live_only.sizes["frame"] == sum(lengths)


# ================================================================================================ 4. statistics


def _lerobot_episode_float32(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One episode's mean and std as LeRobot's ``RunningQuantileStats`` computes them (one ``update`` of the
    episode's (n, d) frames): float32 frames stay float32, ``np.mean`` along axis 0 for E[x] and E[x**2], then
    ``std = sqrt(max(0, E[x**2] - E[x]**2))``, all in float32."""
    b = values.reshape(len(values), -1)
    b = b.astype(np.result_type(b.dtype, np.float32), copy=False)
    mean, mean_sq = np.mean(b, axis=0), np.mean(b ** 2, axis=0)
    return mean, np.sqrt(np.maximum(0, mean_sq - mean ** 2))


def _merge(counts: np.ndarray, mean: np.ndarray, std: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LeRobot's aggregate_feature_stats, dtypes included: count-weighted mean, parallel variance. With float32
    per-episode stats (as LeRobot holds them when it writes stats.json) ``std ** 2`` is squared in float32, the
    rest (times the int64 counts) in float64."""
    counts = np.asarray(counts).reshape(-1, 1).astype(np.int64)
    total_count = counts.sum(axis=0)
    total_mean = (mean * counts).sum(axis=0) / total_count
    variance = ((std ** 2 + (mean - total_mean) ** 2) * counts).sum(axis=0) / total_count
    return total_mean, np.sqrt(variance)


def _episode_table_stats(src: Path, feature: str, key: str) -> np.ndarray:
    rows = []
    for path in sorted((src / "meta" / "episodes").glob("*/*.parquet")):
        t = pq.read_table(path, columns=["episode_index", f"stats/{feature}/{key}"])
        rows += zip(t.column("episode_index").to_pylist(), t.column(f"stats/{feature}/{key}").to_pylist(), strict=True)
    return np.array([np.asarray(v, dtype=np.float64).reshape(-1) for _, v in sorted(rows)])


@pytest.mark.parametrize("name", ["record-test", "open_50"])
def test_lerobot_stats_vs_stats_json_v30(real_stores, name):
    """lerobot_stats vs a LeRobot-written v3.0 ``meta/stats.json`` (min, max, mean, std, count).

    LeRobot computes each episode's stats in one ``RunningQuantileStats.update``: float32 frames stay float32, mean
    and E[x^2] come from ``np.mean(axis=0)`` (a sequential float32 sum along axis 0 of a C-ordered (n, d) array,
    no pairwise summation), and the variance is E[x^2] - E[x]^2 in float32. Where |mean| >> std (open_50 has
    dimensions with mean ~43 and std ~0.03) the subtraction cancels and LeRobot's variance is off by a few tens of
    float32 eps * E[x^2]; lerobot_stats computes in float64 and is exact. So:

    - the explanation is checked first: re-doing LeRobot's float32 computation per episode gives the per-episode
      mean and std of ``meta/episodes`` to one float32 ulp (bit-identical here), and LeRobot's count-weighted
      merge of those float32 values (std squared in float32) gives ``stats.json``'s mean and std to 1e-12;
    - min and max must be equal (as the stored dtype: LeRobot recorded float64 timestamps, stored as float32);
    - mean: |ours - LeRobot's| <= max(4 eps32 E|x|, LeRobot's own float32 error) per dimension;
    - std, compared as variance: |ours - LeRobot's| <= max(16 eps32 E[x^2], LeRobot's own float32 error) per
      dimension. LeRobot's float32 error is measured, not assumed: |merged float32 re-computation - exact|. The
      brief's 16 eps32 E[x^2] alone is not enough: the sequential float32 sums of episodes of ~400 frames reach
      ~32 eps32 E[x^2] after the merge in open_50 (up to ~116 eps32 E_e[x^2] for single episodes);
    - ours must also equal the exact float64 statistics of the parquet data (1e-9 relative to E[x^2]).

    Integer columns are promoted to float64 by LeRobot (exact here, 1e-9); timestamps were float64 when LeRobot
    computed their stats (frame_index / fps), stored as float32: only the generic float32 tolerances apply.
    Quantiles: see test_lerobot_stats_quantiles_vs_stats_json_v30.
    """
    src, ds = real_stores(name)
    info = read_info(src)
    numeric = numeric_features(info)
    ours = lerobot_stats(ds.to_xarray())
    reference = json.loads((src / "meta" / "stats.json").read_text())
    assert set(ours) == set(numeric) == {k for k in reference if k in numeric}
    frames = read_parquet_frames(src, [*numeric])
    episode = frames["episode_index"]
    counts = np.bincount(episode)
    report = []
    for f in numeric:
        dtype = np.dtype(info["features"][f]["dtype"])
        data = frames[f].reshape(len(episode), -1)
        exact = data.astype(np.float64)
        ex_mean, ex_var = exact.mean(axis=0), exact.var(axis=0)
        ex_abs, ex_sq = np.abs(exact).mean(axis=0), (exact ** 2).mean(axis=0)
        o = {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in ours[f].items()}
        r = {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in reference[f].items()}
        what = f"{name}: {f}"
        assert o["count"].tolist() == r["count"].tolist() == [len(data)], what
        cast = np.float32 if dtype == np.float32 else np.float64
        assert_bits(o["min"].astype(cast), r["min"].astype(cast), f"{what}: min")
        assert_bits(o["max"].astype(cast), r["max"].astype(cast), f"{what}: max")
        # ours is exact
        np.testing.assert_allclose(o["mean"], ex_mean, rtol=0, atol=1e-12 * max(1.0, float(ex_abs.max())),
                                   err_msg=f"{what}: mean vs exact")
        assert (np.abs(o["std"] ** 2 - ex_var) <= 1e-9 * ex_sq + 1e-300).all(), f"{what}: variance vs exact"
        # LeRobot's float32 error, re-computed the way LeRobot computes (float32 features but timestamps)
        err_mean, err_var = np.zeros_like(ex_mean), np.zeros_like(ex_var)
        if dtype == np.float32 and f != "timestamp":
            per = [_lerobot_episode_float32(data[episode == e]) for e in range(len(counts))]
            mean32, std32 = np.array([m for m, _ in per]), np.array([s for _, s in per])
            for key, mine in (("mean", mean32), ("std", std32)):
                theirs = _episode_table_stats(src, f, key)
                ulp = np.spacing(np.abs(mine)).astype(np.float64)
                assert (np.abs(theirs - mine) <= ulp).all(), \
                    f"{what}: LeRobot's per-episode {key} is not the float32 E[x^2] - E[x]^2 computation"
            merged_mean, merged_std = _merge(counts, mean32, std32)
            np.testing.assert_allclose(merged_mean, r["mean"], rtol=1e-12, err_msg=f"{what}: merged float32 mean")
            np.testing.assert_allclose(merged_std, r["std"], rtol=1e-12, err_msg=f"{what}: merged float32 std")
            err_mean, err_var = np.abs(merged_mean - ex_mean), np.abs(merged_std ** 2 - ex_var)
        if dtype.kind in "iu":
            tol_mean, tol_var = 1e-9 * np.maximum(1.0, ex_abs), 1e-9 * ex_sq
        else:
            tol_mean = np.maximum(4 * EPS32 * ex_abs, 1.001 * err_mean)
            tol_var = np.maximum(16 * EPS32 * ex_sq, 1.001 * err_var)
        d_mean, d_var = np.abs(o["mean"] - r["mean"]), np.abs(o["std"] ** 2 - r["std"] ** 2)
        assert (d_mean <= tol_mean + 1e-300).all(), f"{what}: mean off by {d_mean.max()} (tolerance {tol_mean})"
        assert (d_var <= tol_var + 1e-300).all(), f"{what}: variance off by {d_var.max()} (tolerance {tol_var})"
        report.append(f"{f}: variance diff up to {np.max(d_var / (EPS32 * ex_sq + 1e-300)):.1f} eps32*E[x^2]")
    print(f"\n[stats] {name}: " + "; ".join(report))


def _quantile_tolerance(data: np.ndarray, episode: np.ndarray) -> np.ndarray:
    """2 x the largest per-episode range / 5000 bins, plus float64 round-off of the merged value."""
    ranges = [np.ptp(data[episode == e], axis=0) for e in np.unique(episode)]
    return 2 * np.max(ranges, axis=0) / HIST_BINS + 1e-9 * np.maximum(1.0, np.abs(data).max(axis=0))


@pytest.mark.parametrize("name", ["record-test", "open_50"])
def test_lerobot_stats_quantiles_vs_stats_json_v30(real_stores, name):
    """Quantiles vs stats.json within 2 x (largest per-episode range) / 5000 per dimension: LeRobot's quantile of
    an episode comes from a 5000-bin histogram over [min, max] (off by at most one bin), the merge is the same
    count-weighted average on both sides. See test_stats_json_quantiles_are_inverse_cdf_quantiles: that tolerance
    holds for inverse-CDF quantiles, so the bound is right and the difference is the quantile definition."""
    src, ds = real_stores(name)
    numeric = numeric_features(read_info(src))
    ours = lerobot_stats(ds.to_xarray())
    reference = json.loads((src / "meta" / "stats.json").read_text())
    frames = read_parquet_frames(src, numeric)
    worst = []
    for f in numeric:
        data = frames[f].reshape(len(frames[f]), -1).astype(np.float64)
        tol = _quantile_tolerance(data, frames["episode_index"])
        for key in QUANTILES:
            d = np.abs(np.asarray(ours[f][key], dtype=np.float64).reshape(-1)
                       - np.asarray(reference[f][key], dtype=np.float64).reshape(-1))
            if (d > tol).any():
                i = int(np.argmax(d / tol))
                worst.append(f"{f} {key}[{i}]: off by {d[i]:.4g}, tolerance {tol[i]:.3g} ({d[i] / tol[i]:.0f}x)")
    assert worst == [], f"{name}: quantiles outside the histogram tolerance: " + "; ".join(worst[:8])


@pytest.mark.parametrize("name", ["record-test", "open_50"])
def test_stats_json_quantiles_are_inverse_cdf_quantiles(real_stores, name):
    """Why lerobot_stats uses the inverse CDF: per-episode inverse-CDF quantiles (numpy method='inverted_cdf', what a
    histogram approximates: the smallest value with CDF >= q), count-weighted over episodes as LeRobot merges
    them, are within 2 x (largest per-episode range) / 5000 of stats.json for every numeric feature."""
    src, _ = real_stores(name)
    numeric = numeric_features(read_info(src))
    reference = json.loads((src / "meta" / "stats.json").read_text())
    frames = read_parquet_frames(src, numeric)
    episode = frames["episode_index"]
    counts = np.bincount(episode)
    for f in numeric:
        data = frames[f].reshape(len(episode), -1).astype(np.float64)
        tol = _quantile_tolerance(data, episode)
        for key, q in QUANTILES.items():
            per = np.array([np.quantile(data[episode == e], q, axis=0, method="inverted_cdf")
                            for e in range(len(counts))])
            merged = (per * counts[:, None]).sum(axis=0) / counts.sum()
            d = np.abs(merged - np.asarray(reference[f][key], dtype=np.float64).reshape(-1))
            assert (d <= tol).all(), f"{name}: {f} {key}: inverse-CDF quantile off by {d.max()} (tolerance {tol})"


def test_lerobot_stats_vs_episodes_stats_v21(real_stores):
    """G1-policy-train (v2.1): no stats.json; LeRobot v2.1 wrote exact per-episode min/max/mean/std (np.std, two
    passes: no cancellation) to meta/episodes_stats.jsonl. Their count-weighted merge, done here, and the store's
    meta.stats must match lerobot_stats within rtol 1e-5 (min and max exactly, as float32 for float32 data)."""
    src, ds = real_stores("G1-policy-train")
    numeric = numeric_features(read_info(src))
    ours = lerobot_stats(ds.to_xarray())
    assert set(ours) == set(numeric)
    rows = sorted((json.loads(line) for line in (src / "meta" / "episodes_stats.jsonl").read_text().splitlines()
                   if line.strip()), key=lambda r: r["episode_index"])
    assert [r["episode_index"] for r in rows] == list(range(ds.meta.total_episodes))
    for f in numeric:
        per = {k: np.array([np.asarray(r["stats"][f][k], dtype=np.float64).reshape(-1) for r in rows])
               for k in ("min", "max", "mean", "std", "count")}
        mean, std = _merge(per["count"][:, 0], per["mean"], per["std"])
        want = {"min": per["min"].min(axis=0), "max": per["max"].max(axis=0), "mean": mean, "std": std}
        cast = np.float32 if read_info(src)["features"][f]["dtype"] == "float32" else np.float64
        for source, got in (("lerobot_stats", ours[f]), ("meta.stats", ds.meta.stats[f])):
            g = {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in got.items()}
            assert g["count"].tolist() == [per["count"].sum()], f"{source} {f} count"
            for k in ("min", "max"):
                assert_bits(g[k].astype(cast), want[k].astype(cast), f"G1: {source} {f} {k}")
            for k in ("mean", "std"):
                np.testing.assert_allclose(g[k], want[k], rtol=1e-5, atol=0, err_msg=f"G1: {source} {f} {k}")


# ================================================================================================ 5. distributed


def _set_write_delay(delay: float) -> None:
    """Run on a worker: make transcode_unit's chunk writes slower (or restore them with 0)."""
    from lerobot_zarr.writing import transcode

    original = transcode.__dict__.setdefault("_test_original_write_rows", transcode.write_pack_bytes)
    if delay <= 0:
        transcode.write_pack_bytes = original
        return

    def slow(*args, **kwargs):
        time.sleep(delay)
        return original(*args, **kwargs)

    transcode.write_pack_bytes = slow


def dist_open(client, *args, **kwargs):
    """open_dataset(..., client=client) with ``client`` as the current dask client (see
    test_distributed_transcode_with_a_client_that_is_not_the_default for why)."""
    with client.as_current():
        return open_dataset(*args, client=client, progress=False, **kwargs)


def _hub_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def test_distributed_transcode_is_bit_identical(client, video_source, tmp_path, monkeypatch):
    from distributed import get_task_stream

    from lerobot_zarr.writing import transcode

    want = tmp_path / "in-process"
    open_dataset(video_source, root=want, progress=False)
    calls = []
    original = transcode.write_pack_bytes
    monkeypatch.setattr(transcode, "write_pack_bytes",
                        lambda *a, **k: (calls.append(a[1]), original(*a, **k))[1])
    with get_task_stream(client) as stream:
        ds = dist_open(client, video_source, root=tmp_path / "distributed")
    assert calls == [], "chunks were written by the calling process, not by the workers"
    units = {t["key"] for t in stream.data if "transcode_unit" in str(t["key"])}
    assert len(units) == 6, f"expected one task per data file, got {len(units)}"  # 6 data files of 2 episodes
    assert_same_store(tmp_path / "distributed", want, "distributed vs in-process")
    assert ds.array_specs[TOP].kind == "video" and ds.meta.materialized_episodes.all()
    np.testing.assert_array_equal(ds.episode(11)[TOP], open_dataset(want, progress=False).episode(11)[TOP])


def test_distributed_transcode_from_hub(client, env, hub, video_source, tmp_path, monkeypatch):
    """HubFiles pickles to the workers with its endpoint: huggingface_hub's endpoint on the workers is an address
    where nothing listens (the test process's is monkeypatched here only), yet they read the test server."""
    import lerobot_zarr.hub.files as hub_files

    server, shas = hub
    if "video" not in shas:
        shas["video"] = server.add_repo("org/video", video_source, tags=["v3.0"])
    assert set(client.run(_hub_endpoint).values()) == {DEAD_ENDPOINT}, "workers must not know the test Hub"
    want = tmp_path / "hub-in-process"
    open_dataset("org/video", root=want, progress=False)
    local = tmp_path / "local"
    open_dataset(video_source, root=local, progress=False)
    here = []
    original = hub_files.HubFiles.get
    monkeypatch.setattr(hub_files.HubFiles, "get",
                        lambda self, rel, start=0, stop=None: (here.append((rel, start, stop)),
                                                               original(self, rel, start, stop))[1])
    server.reset_stats()
    dist_open(client, "org/video", root=tmp_path / "hub-distributed")
    assert_same_store(tmp_path / "hub-distributed", want, "Hub: distributed vs in-process")
    assert_same_store(tmp_path / "hub-distributed", local, "Hub distributed vs local in-process", same_source=False)
    prefix = resolve_prefix("org/video", shas["video"])
    data_gets = [r for r in server.requests("GET", prefix) if "/data/" in r.path or "/videos/" in r.path]
    fetched_here = [rel for rel, _, _ in here if rel.startswith(("data/", "videos/"))]
    assert len(data_gets) > len(fetched_here), "the workers fetched no data from the test Hub"
    assert not any(rel.startswith("videos/") for rel in fetched_here), "videos were decoded in the calling process"


def test_distributed_transcode_survives_a_killed_worker(client, video_source, tmp_path):
    """A worker killed while it transcodes a unit: its nanny restarts it, the scheduler runs the lost task again,
    and the store ends bit-identical to an in-process transcode (chunk writes are idempotent)."""
    from distributed import get_task_stream

    want = tmp_path / "in-process"
    open_dataset(video_source, root=want, progress=False)
    store = tmp_path / "distributed"
    client.run(_set_write_delay, 0.03)  # ~0.5 s per task: the transcode lasts long enough to kill a worker in it
    errors: list[BaseException] = []

    def run() -> None:
        try:
            dist_open(client, video_source, root=store)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    try:
        with get_task_stream(client) as stream:
            thread.start()
            victim, lost, deadline = None, [], time.monotonic() + 60
            while victim is None and thread.is_alive() and time.monotonic() < deadline:
                busy = {w: keys for w, keys in client.processing().items() if keys}
                if busy and any((store / "action" / "c").glob("*/0")):
                    victim, lost = next(iter(busy.items()))
                else:
                    time.sleep(0.01)
            assert victim is not None and thread.is_alive(), "the transcode ended before a worker could be killed"
            done_at_kill = int(read_state(store).complete_episodes().sum())
            victim_pid = client.run(os.getpid, workers=[victim])[victim]
            with contextlib.suppress(Exception):  # the worker dies before answering
                client.run(os._exit, 1, workers=[victim])
            thread.join(120)
        finished = {str(t["key"]): t["worker"] for t in stream.data if "transcode_unit" in str(t["key"])}
        assert lost and all(finished.get(str(k)) not in (None, victim) for k in lost), \
            f"the tasks the killed worker was running ({lost}) were not run again elsewhere: {finished}"
        assert not thread.is_alive(), "the transcode hangs after a worker was killed"
        assert errors == [], f"the transcode failed after a worker was killed: {errors[0]!r}"
        assert done_at_kill < 12, "the kill came after everything was committed"
        client.wait_for_workers(2, timeout=300)
        assert victim not in client.scheduler_info()["workers"], "the killed worker is still listed"
        # killed while making a pack file, the worker leaves it under its temporary name (the next writer's crash
        # cleanup removes it: tests/writing/test_writer_processes.py); nothing else of it may differ
        for debris in store.rglob(f".*.tmp-{victim_pid}-*"):
            debris.unlink()
        assert_same_store(store, want, "distributed with a killed worker vs in-process")
    finally:
        thread.join(120)
        client.run(_set_write_delay, 0.0)


def _corrupt_footer_keep_stat(path: Path) -> None:
    """Overwrite a parquet file's footer with garbage, keeping its size and mtime (the source fingerprint)."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    n = int.from_bytes(data[-8:-4], "little")
    data[-8 - n:-8] = b"\xff" * n
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_distributed_transcode_with_a_corrupt_data_file(client, video_source, tmp_path):
    src = tmp_path / "source"
    shutil.copytree(video_source, src)
    want = tmp_path / "in-process"
    open_dataset(src, root=want, progress=False)
    bad = src / "data" / "chunk-000" / "file-005.parquet"  # episodes 10 and 11
    good_bytes, st = bad.read_bytes(), bad.stat()
    _corrupt_footer_keep_stat(bad)
    store = tmp_path / "distributed"
    with pytest.raises(CorruptSourceError, match="file-005"):
        dist_open(client, src, root=store)
    committed = np.flatnonzero(read_state(store).complete_episodes()).tolist()
    # units still running when the bad one fails are cancelled (resumed below): whole units of the others, never 10, 11
    units = {e // 2 for e in committed}
    assert units <= {0, 1, 2, 3, 4} and committed == sorted(2 * u + k for u in units for k in (0, 1)), \
        f"committed {committed}: whole units of the other files' episodes, not 10 and 11"
    ds = open_dataset(store, progress=False)  # the store opens at its last commit
    assert list(ds.episodes) == committed and len(ds) == int(ds.meta.episode_length[committed].sum())
    assert chunk_files(store, committed) == chunk_files(want, committed), "a committed chunk differs"
    # the file repaired (same size and mtime: the same source): the next open writes only what is missing
    bad.write_bytes(good_bytes)
    os.utime(bad, ns=(st.st_atime_ns, st.st_mtime_ns))
    ds = dist_open(client, src, root=store)
    assert ds.meta.materialized_episodes.all()
    assert_same_store(store, want, "resumed after a corrupt file vs in-process")


def test_distributed_transcode_with_a_client_that_is_not_the_default(client, sources, tmp_path):
    ds = open_dataset(sources["gen"], root=tmp_path / "store", client=client, progress=False)
    assert ds.meta.materialized_episodes.all()


def test_to_xarray_computed_on_a_cluster_after_a_writer_commit(client, tmp_path):
    w = create(tmp_path / "w", fps=10, features={"observation.state": {"dtype": "float32", "shape": [3]}},
               durable=False)
    for e in range(4):
        w.add_episode({"observation.state": np.full((8, 3), e, np.float32)}, task="t")
    x = open_dataset(tmp_path / "w", progress=False).to_xarray()
    w.delete_episodes([0])  # episodes 1..3 become 0..2 and a new one is appended: still 4 episodes of 8 frames
    w.add_episode({"observation.state": np.full((8, 3), 99, np.float32)}, task="t")
    w.close()
    local = x["observation.state"].values  # threads of this process: the dataset's own commit
    assert local[::8, 0].tolist() == [0, 1, 2, 3]
    on_cluster = client.compute(x["observation.state"].data).result()
    assert on_cluster[::8, 0].tolist() == [0, 1, 2, 3], f"the cluster read {on_cluster[::8, 0].tolist()}"


# ================================================================================================ 6. ranks


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
@pytest.mark.parametrize("kind", ["random", "equal", "one_long", "sorted"])
def test_split_episodes_is_a_balanced_deterministic_partition(kind, world_size):
    rng = np.random.default_rng(world_size)
    lengths = {"random": rng.integers(1, 1000, 97), "equal": np.full(40, 50), "one_long": np.r_[5000, np.ones(30)],
               "sorted": np.arange(1, 61)}[kind]
    parts = split_episodes(lengths, world_size)
    assert len(parts) == world_size
    flat = [e for p in parts for e in p]
    assert sorted(flat) == list(range(len(lengths))), "not a partition (disjoint and covering)"
    assert all(p == sorted(p) for p in parts)
    loads = np.array([int(np.asarray(lengths)[p].sum()) for p in parts])
    mean = loads.sum() / world_size
    assert (np.abs(loads - mean) <= int(np.max(lengths))).all(), f"loads {loads.tolist()}, mean {mean}"
    assert split_episodes(list(lengths), world_size) == parts == split_episodes(lengths, world_size, seed=0)
    assert [episodes_for_rank(lengths, r, world_size) for r in range(world_size)] == parts
    other = split_episodes(lengths, world_size, seed=1)
    assert sorted(e for p in other for e in p) == list(range(len(lengths)))


def test_split_episodes_rejects_bad_arguments():
    with pytest.raises(ValueError):
        split_episodes([1, 2, 3], 0)
    with pytest.raises(ValueError):
        split_episodes([1, 2], 3)
    with pytest.raises(ValueError):
        episodes_for_rank([1, 2, 3], 2, 2)
    with pytest.raises(ArgumentError):
        episodes_for_rank([1, 2, 3], -1, 2)


RANK_SCRIPT = r"""
import hashlib, json, sys
import numpy as np
from lerobot_zarr import episodes_for_rank, inspect, open_dataset
repo, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mine = episodes_for_rank(inspect(repo).episode_length, rank, world)
ds = open_dataset(repo, episodes=mine, progress=False)
idx = np.random.default_rng(rank).integers(0, len(ds), 256)
batch = ds.get_batch(idx)
print(json.dumps({"root": str(ds.root), "mine": mine, "len": len(ds), "idx": idx.tolist(),
                  "materialized": np.flatnonzero(ds.meta.materialized_episodes).tolist(),
                  "digest": {k: hashlib.sha256(np.ascontiguousarray(batch[k]).tobytes()).hexdigest()
                             for k in ("observation.state", "action", "index")}}))
"""


def test_two_ranks_each_fetch_only_their_episodes(hub, sources, tmp_path):
    """Two processes, as two machines of a training job: each opens the same Hub repo with its own episodes
    (episodes_for_rank of inspect's lengths) and samples. Each talks to its own server on the same storage (a
    mirror), so what each transferred is measured separately."""
    server, shas = hub
    repo, sha, src = "org/ranks", shas["ranks"], sources["ranks"]
    lengths = open_dataset(src, root=tmp_path / "local", progress=False).meta.episode_length
    expected = split_episodes(lengths, 2)
    local = open_dataset(tmp_path / "local", progress=False)
    groups = {}  # episode -> compressed bytes of its row group (one per episode, 4 episodes per file)
    files = sorted((src / "data").glob("*/*.parquet"))
    for k, path in enumerate(files):
        for g in row_groups(path):
            groups[4 * k + g.index] = g.compressed
    data_total = sum(p.stat().st_size for p in files)
    mirrors = [HubServer(server.storage_dir).start() for _ in range(2)]
    try:
        procs = []
        for rank, mirror in enumerate(mirrors):
            home = tmp_path / f"rank{rank}"
            environ = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE"))}
            environ.update(PYTHONPATH=str(REPO), HF_ENDPOINT=mirror.endpoint, HF_HUB_DISABLE_XET="1",
                           HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                           HF_HOME=str(home / "hf_home"), LEROBOT_ZARR_HOME=str(home / "zarr_home"))
            procs.append(subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, repo, str(rank), "2"], env=environ,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = []
        for rank, proc in enumerate(procs):
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, f"rank {rank} failed:\n{err[-3000:]}"
            outs.append(json.loads(out.strip().splitlines()[-1]))
        for rank, (result, mirror) in enumerate(zip(outs, mirrors, strict=True)):
            mine = expected[rank]
            assert result["mine"] == mine and result["materialized"] == mine
            assert np.flatnonzero(read_state(Path(result["root"])).complete_episodes()).tolist() == mine
            assert Path(result["root"]).is_relative_to(tmp_path / f"rank{rank}" / "zarr_home")
            ref = open_dataset(tmp_path / "local", episodes=mine, progress=False)
            assert result["len"] == len(ref)
            batch = ref.get_batch(np.array(result["idx"]))
            for k, digest in result["digest"].items():
                assert hashlib.sha256(np.ascontiguousarray(batch[k]).tobytes()).hexdigest() == digest, \
                    f"rank {rank}: sampled {k} differs from the local store's"
            fetched = mirror.bytes_sent(resolve_prefix(repo, sha) + "data/")
            share = sum(groups[e] for e in mine)
            touched = {files[e // 4] for e in mine} | {files[0]}  # and episode 0's file: the schema's footer
            # what lies past the last row group of a file (its footer) plus the 16 KiB tail read that finds it
            footers = sum(p.stat().st_size - row_groups(p)[-1].stop + 16 * 1024 for p in touched)
            print(f"\n[ranks] rank {rank}: {len(mine)} episodes, fetched {fetched} B of data files; its row groups "
                  f"{share} B, all data files {data_total} B")
            assert share <= fetched <= 1.15 * share + footers, (fetched, share, footers)
            assert fetched < 0.7 * data_total, "a rank fetched most of the dataset"
            assert mirror.errors == []
        assert sorted(outs[0]["mine"] + outs[1]["mine"]) == list(range(len(lengths)))
        assert local.meta.total_episodes == 16
    finally:
        for mirror in mirrors:
            mirror.stop()
