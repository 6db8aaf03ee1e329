"""Export and publish: ``ds.to_lerobot(path)``, ``ds.push(repo_id)`` and ``lerobot-zarr push`` (issue 4).

- Round trip: folder -> store -> LeRobot v3.0 export -> store again is bit-exact on the three real datasets of
  ../shared/datasets (read only: every store and export goes to a temporary folder) and on generated datasets
  with PNG / JPEG image features and a 2-D feature.
- Layout of the export, checked with pyarrow / json / PIL / pandas directly (independent of our writer): info.json,
  one row group per episode, column types, PNG images, global index, meta/episodes with per-episode stats equal to
  numpy, stats.json, tasks.parquet as pandas reads it, the dataset card, our byte-range index, bounded file sizes.
- Determinism, LeRobot compatibility (skipped unless lerobot >= 0.4 is importable).
- Push to the test Hub server through the real huggingface_hub client: tag v3.0, files, reopen from the Hub,
  no-op second push, incremental push, errors (auth, other dataset, interrupted commit), the CLI.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import G1_CAM, G1_SMALL
from hub_fixtures import (
    REAL_DATASETS,
    assert_same_frames,
    files_under,
    footer_size,
    lib_requests,
    parse_range,
    real_dataset,
    row_groups,
    running_server,
    server_env,
)
from PIL import Image

import lerobot_zarr
import lerobot_zarr.writing.export as export_module
from lerobot_zarr import (
    EmptyStoreError,
    HubAuthError,
    LeRobotZarrDataset,
    NotMaterializedError,
    SourceMismatchError,
    StoreError,
    StoreExistsError,
    open_dataset,
)
from lerobot_zarr.cli import main as cli_main
from lerobot_zarr.store.state import read_state
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

TOKEN = "hf_write"
TAG = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_NAMES = ("min", "max", "mean", "std", "count", *QUANTILES)
DEFAULT_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")
EPISODE_COLUMNS = ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                   "dataset_to_index", "meta/episodes/chunk_index", "meta/episodes/file_index")  # fmt: skip
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
INDEX_FILE = "meta/lerobot_zarr_index.json"
SHA_RE = re.compile(r"[0-9a-f]{40}")

REAL = list(REAL_DATASETS)  # record-test (v3.0), open_50 (v3.0, pandas list vectors), G1-policy-train (v2.1)
GENERATED = ["gen_png", "gen_jpeg"]
ALL = REAL + GENERATED


# ------------------------------------------------------------------------------------------------ datasets


def _generate(key: str, path: Path) -> Path:
    if key == "gen_png":  # PNG images, a 2-D feature, a declared (absent) video, three tasks
        return write_sample_dataset(
            path, n_episodes=5, lengths=(12, 30), image_keys=("observation.images.top",), image_shape=(12, 16, 3),
            image_format="png", extra_nd=True, video_keys=("observation.images.wrist",),
            tasks=("pick the cube", "place the cube", "push the cube"), seed=11)  # fmt: skip
    if key == "gen_jpeg":  # JPEG images, pandas-style list vectors, a 2-D feature
        return write_sample_dataset(
            path, n_episodes=4, lengths=(10, 25), image_keys=("observation.images.front",), image_shape=(10, 14, 3),
            image_format="jpeg", extra_nd=True, vector_type="list", seed=12)  # fmt: skip
    if key == "gen_big":  # ~4 MB of frames: several 1 MB data files
        return write_sample_dataset(path, n_episodes=14, lengths=(250, 300), state_dim=128, action_dim=128, seed=13)
    if key == "gen_other":  # a different dataset (other features) for the "repo holds another dataset" test
        return write_sample_dataset(path, n_episodes=3, lengths=(10, 20), state_dim=3, action_dim=2, seed=14)
    raise KeyError(key)


@dataclass
class Built:
    key: str
    source: Path  # the LeRobot folder (read only)
    ds: LeRobotZarrDataset  # store made from the source
    export: Path  # ds.to_lerobot(...)
    ds2: LeRobotZarrDataset  # store made from the export
    export_warnings: list[str]  # what ds.to_lerobot warned about


class Builds:
    """Stores and exports made once per module, on first use (a missing real dataset skips the test using it)."""

    def __init__(self, base: Path):
        self.base = base
        self._cache: dict[str, Built] = {}

    def source(self, key: str) -> Path:
        if key in REAL_DATASETS:
            return real_dataset(key)
        path = self.base / "generated" / key
        return path if (path / "meta" / "info.json").is_file() else _generate(key, path)

    def get(self, key: str) -> Built:
        if key not in self._cache:
            source = self.source(key)
            work = self.base / key
            with warnings.catch_warnings(record=True) as opened:
                warnings.simplefilter("always")
                # G1's camera is left out of these exports (most episodes lack its mp4): kept small in the store
                small = {G1_CAM: G1_SMALL} if key == "G1-policy-train" else None
                ds = open_dataset(source, root=work / "store", progress=False, resize=small)
            assert set(ds.left_out) == {k for w in opened for k in ds.left_out if repr(k) in str(w.message)}
            with warnings.catch_warnings(record=True) as exporting:
                warnings.simplefilter("always")
                export = ds.to_lerobot(work / "export", progress=False)
            ds2 = open_dataset(export, root=work / "store2", progress=False)
            self._cache[key] = Built(key, source, ds, Path(export), ds2, [str(w.message) for w in exporting])
        return self._cache[key]


@pytest.fixture(scope="module")
def builds(module_tmp) -> Builds:
    return Builds(module_tmp)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in files_under(root)}


def _video_features(info: dict) -> list[str]:
    return [k for k, ft in info["features"].items() if ft.get("dtype") == "video"]


def _kept(ds: LeRobotZarrDataset) -> list[str]:
    """Stored features that samples (and so the export) carry: not the cameras left out (missing videos)."""
    return [k for k in ds.meta.stored_features if k not in ds.left_out]


# ------------------------------------------------------------------------------------------------ round trip


@pytest.mark.parametrize("key", ALL)
def test_round_trip_through_export_is_bit_exact(builds, key):
    b = builds.get(key)
    assert b.ds.meta.total_episodes > 1
    assert_same_frames(b.ds2, b.ds, f"{key}: store from the export vs store from the source")
    assert set(b.ds2.meta.stored_features) == set(_kept(b.ds)), key
    assert b.ds2.left_out == {} and b.ds2.meta.unavailable == {}, key
    for k in _kept(b.ds):  # dtype and shape survive the round trip
        want, got = b.ds.meta.features[k], b.ds2.meta.features[k]
        assert got["dtype"] == want["dtype"] and list(got["shape"]) == list(want["shape"]), (key, k, got, want)
    assert b.ds2.meta.fps == b.ds.meta.fps and b.ds2.meta.robot_type == b.ds.meta.robot_type


@pytest.mark.parametrize("key", ["record-test", "open_50", "G1-policy-train", "gen_png"])
def test_videos_of_the_source_are_left_out_of_the_export(builds, key):
    """These sources lack the mp4 files of their cameras (all of them, or, for G1-policy-train, all but four
    episodes'): the cameras are unavailable in the store, and left out of the export with a warning."""
    b = builds.get(key)
    videos = _video_features(json.loads((b.source / "meta" / "info.json").read_text()))
    assert videos, f"{key}: the source declares no video feature"
    assert set(b.ds.left_out) == set(videos), f"{key}: left out {sorted(b.ds.left_out)}, videos {videos}"
    assert set(b.ds.meta.unavailable) == set(videos), key
    for k in videos:
        warned = [w for w in b.export_warnings if f"{k!r} is left out of the export" in w]
        assert warned, f"{key}: no warning that {k!r} is left out of the export: {b.export_warnings}"
    info = json.loads((b.export / "meta" / "info.json").read_text())
    assert not set(videos) & set(info["features"]), f"{key}: video features {videos} listed in the export"
    assert _video_features(info) == [] and info.get("video_path") is None
    assert not (b.export / "videos").exists()
    assert set(info["features"]) == set(_kept(b.ds))


# ------------------------------------------------------------------------------------------------ layout


def _arrow_type(dtype: str) -> pa.DataType:
    return pa.bool_() if dtype == "bool" else pa.from_numpy_dtype(np.dtype(dtype))


def _check_column_type(name: str, t: pa.DataType, ft: dict) -> None:
    shape = list(ft["shape"])
    if ft["dtype"] == "image":
        assert pa.types.is_struct(t), f"{name}: image column of type {t}"
        fields = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
        assert fields == {"bytes": pa.binary(), "path": pa.string()}, f"{name}: image struct {t}"
        return
    if shape == [1]:
        assert t == _arrow_type(ft["dtype"]), f"{name}: scalar column {t}, feature dtype {ft['dtype']}"
        return
    assert pa.types.is_fixed_size_list(t), f"{name}: vector column must be fixed_size_list, got {t}"
    for depth, size in enumerate(shape):
        assert pa.types.is_fixed_size_list(t) or (depth > 0 and pa.types.is_list(t)), f"{name}: level {depth} {t}"
        if pa.types.is_fixed_size_list(t):
            assert t.list_size == size, f"{name}: list size {t.list_size} at level {depth}, shape {shape}"
        t = t.value_type
    assert t == _arrow_type(ft["dtype"]), f"{name}: leaf type {t}, feature dtype {ft['dtype']}"


def _flat_values(column: pa.ChunkedArray) -> np.ndarray:
    arr = column.combine_chunks()
    while pa.types.is_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
        arr = arr.flatten()
    return arr.to_numpy(zero_copy_only=False)


def _decode(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)))


def _expected_stats(values: np.ndarray, ft: dict) -> dict[str, np.ndarray]:
    """numpy stats of a feature's frames, shaped like LeRobot's (images per channel in [0, 1], shape (C, 1, 1))."""
    n = len(values)
    if ft["dtype"] == "image":
        channels = values.shape[-1]
        x = values.reshape(-1, channels).astype(np.float64) / 255.0
        shape = (channels, 1, 1)
        low, high = x.min(axis=0), x.max(axis=0)
    else:
        shape = tuple(ft["shape"])[-1:]  # LeRobot 0.6.1: over every axis but the last
        x = values.reshape(-1, shape[0]).astype(np.float64)
        low, high = x.min(axis=0), x.max(axis=0)
    out = {"min": low, "max": high, "mean": x.mean(axis=0), "std": x.std(axis=0)}
    for name, q in QUANTILES.items():
        out[name] = np.quantile(x, q, axis=0, method="linear")
    out = {k: v.reshape(shape) for k, v in out.items()}
    out["count"] = np.array([n])
    return out


def _leaves(value) -> list:
    return [x for v in value for x in _leaves(v)] if isinstance(value, list) else [value]


def _close(got, want, what: str) -> None:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9, err_msg=what)


def check_layout(out: Path, ds: LeRobotZarrDataset, what: str) -> dict[int, tuple[str, int]]:
    """Everything LeRobot v3.0 requires of the folder ``out`` exported from the complete store ``ds``.

    Returns where each episode lives: ``{episode: (data file, row group)}``."""
    n_episodes, n_frames = ds.meta.total_episodes, len(ds)
    lengths = np.asarray(ds.meta.episode_length, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    stored = _kept(ds)  # cameras left out of samples (missing videos) are left out of the export
    frames = ds.get_batch(np.arange(n_frames))
    tasks = list(ds.meta.tasks)

    # meta/info.json
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0", what
    assert info["total_episodes"] == n_episodes, what
    assert info["total_frames"] == n_frames, what
    assert info["total_tasks"] == len(tasks), what
    assert info["data_path"] == DATA_PATH, what
    assert info["splits"] == {"train": f"0:{n_episodes}"}, what
    assert info["fps"] == ds.meta.info["fps"], what
    assert isinstance(info["chunks_size"], int) and isinstance(info["data_files_size_in_mb"], (int, float)), what
    assert set(info["features"]) == set(stored), f"{what}: features {sorted(info['features'])} vs {sorted(stored)}"
    for k in DEFAULT_FEATURES:
        assert k in info["features"], f"{what}: default feature {k} missing"
    features = info["features"]

    # data files: one row group per episode, in global index order; column types; values; PNG images
    data_files = sorted(p.relative_to(out).as_posix() for p in out.glob("data/*/*.parquet"))
    assert data_files, what
    assert all(p.relative_to(out).as_posix() in data_files for p in files_under(out / "data")), what
    where: dict[int, tuple[str, int]] = {}
    order: list[int] = []
    tables = []
    for rel in data_files:
        assert re.fullmatch(r"data/chunk-\d{3}/file-\d{3}\.parquet", rel), rel
        pf = pq.ParquetFile(out / rel)
        schema = pf.schema_arrow
        assert set(schema.names) == set(stored), f"{what} {rel}: columns {schema.names}"
        for k in stored:
            _check_column_type(f"{what} {rel} {k}", schema.field(k).type, features[k])
        for g in range(pf.metadata.num_row_groups):
            ep = pf.read_row_group(g, columns=["episode_index"]).column(0).to_numpy()
            values = np.unique(ep)
            assert len(values) == 1, f"{what} {rel}: row group {g} holds episodes {values.tolist()}"
            e = int(values[0])
            assert e not in where, f"{what}: episode {e} in {where[e]} and in {rel} row group {g}"
            assert len(ep) == lengths[e], f"{what} {rel}: row group {g} has {len(ep)} rows, episode {e} {lengths[e]}"
            where[e] = (rel, g)
            order.append(e)
        tables.append(pf.read())
    assert order == list(range(n_episodes)), f"{what}: episodes in file/row-group order {order[:20]}"
    table = pa.concat_tables(tables)
    assert table.num_rows == n_frames, what
    assert np.array_equal(table.column("index").to_numpy(), np.arange(n_frames)), f"{what}: index not 0..N-1"
    for k in stored:
        ft = features[k]
        if ft["dtype"] == "image":
            structs = table.column(k).combine_chunks()
            blobs = structs.field("bytes").to_pylist()
            assert all(isinstance(p, str) for p in structs.field("path").to_pylist()), f"{what}: {k} paths"
            for i, blob in enumerate(blobs):
                assert blob[:8] == PNG_MAGIC, f"{what}: {k} frame {i} is not PNG ({blob[:8]!r})"
                image = _decode(blob).reshape(frames[k][i].shape)
                assert np.array_equal(image, frames[k][i]), f"{what}: {k} frame {i} decodes to other pixels"
            continue
        want = np.asarray(frames[k])
        got = _flat_values(table.column(k)).astype(want.dtype, copy=False).reshape(want.shape)
        assert got.tobytes() == want.tobytes(), f"{what}: column {k} differs from the store's frames"

    # meta/episodes
    meta_files = sorted(p.relative_to(out).as_posix() for p in out.glob("meta/episodes/*/*.parquet"))
    assert meta_files, what
    parts = []
    for rel in meta_files:
        m = re.fullmatch(r"meta/episodes/chunk-(\d{3})/file-(\d{3})\.parquet", rel)
        assert m, rel
        t = pq.read_table(out / rel)
        assert np.all(t.column("meta/episodes/chunk_index").to_numpy() == int(m.group(1))), f"{what} {rel}"
        assert np.all(t.column("meta/episodes/file_index").to_numpy() == int(m.group(2))), f"{what} {rel}"
        parts.append(t)
    episodes = pa.concat_tables(parts)
    columns = set(episodes.column_names)
    missing = [c for c in EPISODE_COLUMNS if c not in columns]
    missing += [f"stats/{k}/{s}" for k in stored for s in STAT_NAMES if f"stats/{k}/{s}" not in columns]
    assert not missing, f"{what}: meta/episodes lacks {missing[:10]}"
    col = {c: episodes.column(c).to_pylist() for c in episodes.column_names}
    assert col["episode_index"] == list(range(n_episodes)), what
    assert col["length"] == lengths.tolist(), what
    assert col["dataset_from_index"] == starts.tolist(), what
    assert col["dataset_to_index"] == (starts + lengths).tolist(), what
    task_index = np.asarray(frames["task_index"]).reshape(-1)
    for e in range(n_episodes):
        rel = DATA_PATH.format(chunk_index=col["data/chunk_index"][e], file_index=col["data/file_index"][e])
        assert rel == where[e][0], f"{what}: meta/episodes puts episode {e} in {rel}, it is in {where[e][0]}"
        used = {tasks[t] for t in task_index[starts[e]:starts[e] + lengths[e]].tolist()}
        listed = col["tasks"][e]
        assert len(listed) == len(set(listed)) and set(listed) == used, f"{what}: episode {e} tasks {listed}"
        for k in stored:
            values = np.asarray(frames[k][starts[e]:starts[e] + lengths[e]])
            want = _expected_stats(values, features[k])
            for s in STAT_NAMES:
                got = col[f"stats/{k}/{s}"][e]
                if s == "count":
                    assert np.asarray(got).reshape(-1).tolist() == [lengths[e]], f"{what}: count of {k} ep {e}"
                else:
                    _close(got, want[s], f"{what}: stats/{k}/{s} of episode {e}")

    # meta/stats.json: count-weighted merge == numpy over every frame
    stats = json.loads((out / "meta" / "stats.json").read_text())
    for k in stored:
        assert k in stats, f"{what}: stats.json lacks {k}"
        assert set(STAT_NAMES) <= set(stats[k]), f"{what}: stats.json[{k}] has {sorted(stats[k])}"
        want = _expected_stats(np.asarray(frames[k]), features[k])
        assert np.asarray(stats[k]["count"]).reshape(-1).tolist() == [n_frames], f"{what}: stats.json {k} count"
        for s in ("min", "max", "mean", "std"):
            _close(stats[k][s], want[s], f"{what}: stats.json {k} {s}")
        if (lengths >= 2).any():  # LeRobot 0.6.1's: floats, integer and bool features' too (one-frame episodes aside)
            assert all(type(v) is float for s in STAT_NAMES if s != "count" for v in _leaves(stats[k][s])), \
                f"{what}: stats.json {k} holds a statistic that is not a float"
        for s in QUANTILES:
            q = np.asarray(stats[k][s], dtype=np.float64)
            assert q.shape == want[s].shape, f"{what}: stats.json {k} {s} shape {q.shape}"
            assert np.all(q >= want["min"] - 1e-9) and np.all(q <= want["max"] + 1e-9), f"{what}: {k} {s} range"

    # meta/tasks.parquet: pandas sees the task text in an index named "task"
    tasks_table = pq.read_table(out / "meta" / "tasks.parquet")
    assert "task_index" in tasks_table.column_names, what
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if pd is not None:
        df = pd.read_parquet(out / "meta" / "tasks.parquet")
        assert df.index.name == "task", f"{what}: tasks.parquet index name {df.index.name!r}"
        assert list(df.index) == tasks, f"{what}: tasks {list(df.index)[:5]} vs {tasks[:5]}"
        assert df["task_index"].tolist() == list(range(len(tasks))), what

    # README.md: dataset card with a YAML header pointing the datasets library at the data files
    card = (out / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\n"), f"{what}: README.md does not start with a YAML header"
    header = card.split("---\n", 2)[1]
    assert "configs:" in header and "data_files: data/*/*.parquet" in header, f"{what}: card header {header!r}"
    try:
        import yaml
    except ImportError:
        yaml = None
    if yaml is not None:
        assert isinstance(yaml.safe_load(header).get("configs"), list), what

    return where


def check_index(out: Path, ds: LeRobotZarrDataset, where: dict[int, tuple[str, int]], what: str) -> None:
    """meta/lerobot_zarr_index.json (format 2, contract in lerobot_zarr.lerobot.index_file), checked against the files with
    json / pyarrow / hashlib: every episode's data file and first row, the footers (sizes and, inlined, bytes), the
    identities of the files it stands for, and the metadata it copies."""
    n_episodes = ds.meta.total_episodes
    index = json.loads((out / INDEX_FILE).read_text())
    assert index["format_version"] == 2, what
    assert set(index) == {"format_version", "files", "info", "tasks", "stats", "data_files", "video_files",
                          "episodes", "footer_bytes", "footers"}, f"{what}: index keys {sorted(index)}"
    episodes = index["episodes"]
    assert episodes["length"] == ds.meta.episode_length.tolist(), f"{what}: index episode lengths"
    first_row = {}
    for rel in sorted({rel for rel, _ in where.values()}):
        md = pq.ParquetFile(out / rel).metadata
        rows = np.concatenate([[0], np.cumsum([md.row_group(g).num_rows for g in range(md.num_row_groups)])])
        first_row.update({e: int(rows[g]) for e, (r, g) in where.items() if r == rel})
    for e in range(n_episodes):
        rel = index["data_files"][episodes["data_file"][e]]
        assert rel == where[e][0], f"{what}: index puts episode {e} in {rel}, it is in {where[e][0]}"
        assert episodes["file_row"][e] == first_row[e], f"{what}: index file row of episode {e}"
    for rel in index["data_files"]:
        tail = (out / rel).read_bytes()[-(footer_size(out / rel)):]
        assert index["footer_bytes"][rel] == len(tail), f"{what}: footer size of {rel}"
        if index["footers"]:
            assert base64.b64decode(index["footers"][rel]) == tail, f"{what}: inlined footer of {rel}"
    covered = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()
                     and p.relative_to(out).parts[0] in ("meta", "data", "videos") and p.name != Path(INDEX_FILE).name)
    assert sorted(index["files"]) == covered, f"{what}: index covers {sorted(index['files'])}"
    for rel, ids in index["files"].items():
        data = (out / rel).read_bytes()
        assert ids == {"sha256": hashlib.sha256(data).hexdigest(),
                       "git_sha1": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}, f"{what}: id of {rel}"
    assert index["info"] == json.loads((out / "meta" / "info.json").read_text()), what
    assert index["stats"] == json.loads((out / "meta" / "stats.json").read_text()), what
    tasks = pq.read_table(out / "meta" / "tasks.parquet").to_pydict()
    assert index["tasks"] == [t for _, t in sorted(zip(tasks["task_index"], tasks["task"], strict=True))], what


@pytest.mark.parametrize("key", ALL)
def test_export_layout(builds, key):
    b = builds.get(key)
    check_layout(b.export, b.ds, key)


@pytest.mark.parametrize("key", ALL)
def test_index_file_gives_each_episode_its_row_group_byte_range(builds, key):
    b = builds.get(key)
    where = {}
    for rel in sorted(p.relative_to(b.export).as_posix() for p in b.export.glob("data/*/*.parquet")):
        pf = pq.ParquetFile(b.export / rel)
        for g in range(pf.metadata.num_row_groups):
            where[int(pf.read_row_group(g, columns=["episode_index"]).column(0)[0].as_py())] = (rel, g)
    check_index(b.export, b.ds, where, key)


@dataclass
class BigExport:
    ds: LeRobotZarrDataset
    out: Path
    where: dict[int, tuple[str, int]]


@pytest.fixture(scope="module")
def big_export(builds, tmp_path_factory) -> BigExport:
    """A ~4 MB dataset exported with data_files_size_in_mb=1: several data files."""
    base = tmp_path_factory.mktemp("big_export")
    ds = open_dataset(builds.source("gen_big"), root=base / "store", progress=False)
    out = Path(ds.to_lerobot(base / "export", data_files_size_in_mb=1, progress=False))
    where = {}
    for rel in sorted(p.relative_to(out).as_posix() for p in out.glob("data/*/*.parquet")):
        pf = pq.ParquetFile(out / rel)
        for g in range(pf.metadata.num_row_groups):
            where[int(pf.read_row_group(g, columns=["episode_index"]).column(0)[0].as_py())] = (rel, g)
    return BigExport(ds, out, where)


def _uncompressed(path: Path, row_group: int | None = None) -> int:
    """Parquet data bytes the way LeRobot measures a data file (sum of the column chunks' uncompressed sizes)."""
    md = pq.read_metadata(path)
    groups = range(md.num_row_groups) if row_group is None else [row_group]
    return sum(md.row_group(g).column(c).total_uncompressed_size for g in groups for c in range(md.num_columns))


def test_info_records_the_file_sizes_used(builds, tmp_path):
    """info.json gives the data and video file size limits the export used, not the source's."""
    b = builds.get("gen_png")
    source_info = json.loads((b.source / "meta" / "info.json").read_text())
    out = b.ds.to_lerobot(tmp_path / "sized", data_files_size_in_mb=3, video_files_size_in_mb=7, progress=False)
    info = json.loads((Path(out) / "meta" / "info.json").read_text())
    assert (info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (3, 7)
    assert source_info.get("video_files_size_in_mb") != 7, "the check needs a source with another value"


def test_small_data_files_hold_whole_episodes(big_export, tmp_path):
    ds, out = big_export.ds, big_export.out
    assert sum(_uncompressed(p) for p in out.glob("data/*/*.parquet")) > 3 * 2**20, "expected several MB of data"
    where = check_layout(out, ds, "gen_big (1 MB files)")  # one row group per episode, no episode in two files
    per_file: dict[str, list[int]] = {}
    for e, (rel, _) in sorted(where.items()):
        per_file.setdefault(rel, []).append(e)
    assert len(per_file) >= 3, f"expected several data files, got {sorted(per_file)}"
    for rel, eps in per_file.items():
        assert eps == list(range(eps[0], eps[-1] + 1)), f"{rel}: episodes {eps} not consecutive"
    assert json.loads((out / "meta" / "info.json").read_text())["data_files_size_in_mb"] == 1
    assert_same_frames(open_dataset(out, root=tmp_path / "store2", progress=False), ds, "gen_big round trip")


def test_small_data_files_index(big_export):
    check_index(big_export.out, big_export.ds, big_export.where, "gen_big (1 MB files)")


def test_data_files_respect_data_files_size_in_mb(big_export):
    """LeRobot starts a new file when the current one plus the next episode would reach the limit, the sizes
    measured as uncompressed parquet bytes in MiB: a file of several episodes stays under the limit."""
    out, limit = big_export.out, 2**20
    per_file: dict[str, list[tuple[int, int]]] = {}
    for e, (rel, g) in sorted(big_export.where.items()):
        per_file.setdefault(rel, []).append((e, g))
    sizes = {rel: _uncompressed(out / rel) for rel in per_file}
    over = {rel: f"{sizes[rel] / 2**20:.2f} MiB, {len(groups)} episodes" for rel, groups in per_file.items()
            if len(groups) > 1 and sizes[rel] > 1.1 * limit}  # fmt: skip
    assert not over, f"data files over data_files_size_in_mb=1 (10% slack): {over}"
    names = sorted(per_file)
    for a, b in zip(names, names[1:]):  # a new file was started because the next episode did not fit
        e, g = per_file[b][0]
        assert sizes[a] + _uncompressed(out / b, g) > 0.9 * limit, f"{b} started although episode {e} fitted in {a}"


# ------------------------------------------------------------------------------------------------ determinism


@pytest.mark.parametrize("key", ["record-test", "open_50", "G1-policy-train", "gen_png", "gen_jpeg"])
def test_export_is_deterministic(builds, tmp_path, key):
    b = builds.get(key)
    again = _files(b.ds.to_lerobot(tmp_path / "again", progress=False))
    first = _files(b.export)
    assert sorted(again) == sorted(first), key
    differ = [rel for rel in first if first[rel] != again[rel]]
    assert not differ, f"{key}: two exports of the same store differ in {differ}"


# ------------------------------------------------------------------------------------------------ LeRobot


@pytest.mark.parametrize("key", ["record-test", "gen_png"])
def test_lerobot_loads_the_export(builds, key):
    pytest.importorskip("lerobot", reason="lerobot (>= 0.4) is not installed here: the LeRobotDataset "
                                          "compatibility of the export was not checked")  # fmt: skip
    from importlib.metadata import version

    found = tuple(int(x) for x in re.findall(r"\d+", version("lerobot"))[:2])
    if found < (0, 4):
        pytest.skip(f"lerobot {version('lerobot')} is older than 0.4 (no v3.0 support)")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    b = builds.get(key)
    theirs = LeRobotDataset(repo_id="local/x", root=b.export)
    ours = LeRobotZarrDataset(b.ds.root, image_format="float32_chw")
    assert len(theirs) == len(ours) and theirs.num_episodes == ours.meta.total_episodes
    n = len(ours)
    for i in sorted({0, 1, n // 3, n // 2, n - 2, n - 1}):
        a, o = theirs[i], ours[i]
        for k in _kept(ours):
            x = a[k].numpy() if hasattr(a[k], "numpy") else np.asarray(a[k])
            y = np.asarray(o[k])
            if ours.meta.features[k]["dtype"] == "image":
                assert x.dtype == np.float32 and x.shape == y.shape, (k, x.dtype, x.shape, y.shape)
                np.testing.assert_allclose(x, y, atol=1e-6, err_msg=f"{key} frame {i} {k}")
            else:
                assert np.array_equal(x.reshape(-1), y.reshape(-1).astype(x.dtype)), f"{key} frame {i} {k}"
        assert a["task"] == o["task"], (key, i)


# ------------------------------------------------------------------------------------------------ Hub


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    yield from running_server(HubServer(tmp_path_factory.mktemp("push_hub") / "storage", tokens={TOKEN: "alice"}))


@pytest.fixture
def env(monkeypatch, tmp_path, hub):
    yield from server_env(monkeypatch, tmp_path, hub)


def _tree(hub: HubServer, repo_id: str, commit: str | None = None) -> dict[str, str]:
    """path -> sha256 of a commit's files (default: the head of main)."""
    docs = hub.commits(repo_id)
    doc = docs[0] if commit is None else next(d for d in docs if d["id"] == commit)
    return {path: entry["sha256"] for path, entry in doc["tree"].items()}


def _row_groups_by_episode(export: Path) -> dict:
    """episode -> (data file, RowGroup byte range) of a LeRobot v3.0 folder, from the parquet footers."""
    out = {}
    for rel in sorted(p.relative_to(export).as_posix() for p in export.glob("data/*/*.parquet")):
        pf = pq.ParquetFile(export / rel)
        for rg in row_groups(export / rel):
            out[int(pf.read_row_group(rg.index, columns=["episode_index"]).column(0)[0].as_py())] = (rel, rg)
    return out


def _remote_state(hub: HubServer, repo_id: str):
    return (hub.refs(repo_id), hub.list_files(repo_id), [c["id"] for c in hub.commits(repo_id)],
            {rel: hub.get_file(repo_id, rel) for rel in hub.list_files(repo_id)})  # fmt: skip


def _edit_store(store: Path, episode: int, feature: str = "action") -> None:
    """Change one value of one episode's rows in place (the bytes of an edited recording), at the pack and row
    the store's episode table gives."""
    table = read_state(store).table
    chunk = store / feature / "c" / str(int(table.chunk[episode])) / "0"
    mm = np.memmap(chunk, dtype=np.float32, mode="r+")
    row = int(table.offset[episode]) * (mm.size // int(read_state(store).packs.rows[table.chunk[episode]]))
    mm[row] = mm[row] + np.float32(1.5)
    mm.flush()
    del mm


def _copy_store(ds: LeRobotZarrDataset, dest: Path) -> Path:
    shutil.copytree(ds.root, dest)
    return dest


def _put_oids(hub: HubServer) -> dict[str, int]:
    """LFS objects uploaded (PUT to the signed URL /__lfs/<type>/<repo>/<sha256>): oid -> bytes received."""
    return {r.path.rsplit("/", 1)[1]: r.bytes_received for r in hub.requests("PUT")}


@pytest.mark.parametrize("key", ALL)
def test_push_then_open_from_the_hub_is_bit_exact(hub, env, builds, tmp_path, key):
    b = builds.get(key)
    repo_id = f"alice/{key}"
    sha = b.ds.push(repo_id, token=TOKEN, progress=False)
    assert isinstance(sha, str) and SHA_RE.fullmatch(sha), sha
    refs = hub.refs(repo_id)
    assert refs["branches"]["main"] == sha and refs["tags"].get(TAG) == sha, refs
    assert [c["id"] for c in hub.commits(repo_id)][0] == sha
    local = _files(b.export)
    assert hub.list_files(repo_id) == sorted(local), f"{key}: remote files differ from the local export"
    for rel, data in local.items():
        assert hub.get_file(repo_id, rel) == data, f"{key}: remote {rel} differs from the local export"

    whole = open_dataset(repo_id, token=TOKEN, root=tmp_path / "hub_whole", progress=False)
    assert whole.meta.source.get("commit") == sha
    assert_same_frames(whole, b.ds, f"{repo_id} (whole) vs the local store")

    last = b.ds.meta.total_episodes - 1
    hub.reset_stats()
    part = open_dataset(repo_id, token=TOKEN, root=tmp_path / "hub_part", episodes=[1, last], progress=False)
    assert list(part.episodes) == [1, last]
    # with our index: one metadata GET, then one range GET per episode, of exactly its row group
    downloads = [r for r in lib_requests(hub, "GET", f"/datasets/{repo_id}/resolve/")]
    where = _row_groups_by_episode(b.export)
    wanted = sorted((where[e][0], where[e][1].start, where[e][1].stop) for e in (1, last))
    got_data = sorted((r.path.split(f"/{sha}/", 1)[1], *parse_range(r.range, 1 << 62)) for r in downloads
                      if "/data/" in r.path)  # fmt: skip
    others = sorted(r.path.split(f"/{sha}/", 1)[1] for r in downloads if "/data/" not in r.path)
    assert others == [INDEX_FILE], f"partial open downloaded {others} besides the data"
    assert got_data == wanted, f"partial open read {got_data}, the row groups of episodes 1 and {last} are {wanted}"
    assert np.flatnonzero(part.meta.materialized_episodes).tolist() == [1, last]
    assert_same_frames(part, LeRobotZarrDataset(b.ds.root, episodes=[1, last]), f"{repo_id} episodes [1, {last}]")


def test_second_push_of_an_unchanged_store_makes_no_commit_and_uploads_nothing(hub, env, builds):
    b = builds.get("gen_png")
    repo_id = "alice/unchanged"
    sha = b.ds.push(repo_id, token=TOKEN, progress=False)
    before = _remote_state(hub, repo_id)
    hub.reset_stats()
    assert b.ds.push(repo_id, token=TOKEN, progress=False) is None
    assert _remote_state(hub, repo_id) == before
    assert hub.refs(repo_id)["tags"][TAG] == sha
    reqs = lib_requests(hub)
    assert not [r for r in reqs if r.method == "PUT"], "file bytes uploaded by a no-op push"
    assert not [r for r in reqs if "/commit/" in r.path], "commit endpoint called by a no-op push"
    assert not [r for r in reqs if "/info/lfs/" in r.path or "/tag/" in r.path], [r.path for r in reqs]
    allowed = (
        r"POST /api/repos/create",
        rf"GET /api/datasets/{repo_id}(/revision/[^/]+)?",
        rf"GET /api/datasets/{repo_id}/tree/(main|[0-9a-f]{{40}})(/.*)?",
        rf"GET /api/datasets/{repo_id}/refs",
        rf"GET /api/datasets/{repo_id}/auth-check/write",
        rf"POST /api/datasets/{repo_id}/(preupload|paths-info)/main",
        rf"(HEAD|GET) /datasets/{repo_id}/resolve/[^/]+/meta/[^/]+\.json",
        r"GET /api/whoami-v2",
    )
    seen = {f"{r.method} {r.path}" for r in reqs}
    unexpected = sorted(s for s in seen if not any(re.fullmatch(p, s) for p in allowed))
    assert not unexpected, f"a no-op push made other requests: {unexpected}"
    received = sum(r.bytes_received for r in reqs)
    assert received < 16_384, f"a no-op push sent {received} request body bytes"


def test_incremental_push_commits_only_the_edited_episode_files(hub, env, builds, tmp_path):
    """Default file size (one data file): the edit makes exactly one commit touching the data file and meta."""
    b = builds.get("gen_png")
    store = _copy_store(b.ds, tmp_path / "store")
    repo_id = "alice/incremental"
    sha1 = LeRobotZarrDataset(store).push(repo_id, token=TOKEN, progress=False)
    commits1 = [c["id"] for c in hub.commits(repo_id)]
    tree1 = _tree(hub, repo_id)

    _edit_store(store, episode=2)
    edited = LeRobotZarrDataset(store)
    hub.reset_stats()
    sha2 = edited.push(repo_id, token=TOKEN, progress=False)
    assert isinstance(sha2, str) and sha2 != sha1
    commits2 = hub.commits(repo_id)
    assert [c["id"] for c in commits2] == [sha2, *commits1], "expected exactly one new commit"
    assert commits2[0]["parent"] == sha1
    assert hub.refs(repo_id)["tags"][TAG] == sha2, "tag v3.0 did not move to the new commit"
    tree2 = _tree(hub, repo_id)
    assert set(tree2) == set(tree1)
    changed = {p for p in tree2 if tree2[p] != tree1[p]}
    assert "data/chunk-000/file-000.parquet" in changed, changed
    assert changed <= {"data/chunk-000/file-000.parquet", "meta/stats.json", INDEX_FILE} | {
        p for p in tree2 if p.startswith("meta/episodes/")}, f"unexpected changed files {sorted(changed)}"
    for same in ("meta/info.json", "meta/tasks.parquet", "README.md"):
        assert same not in changed, same
    uploaded = _put_oids(hub)
    assert tree1["meta/tasks.parquet"] not in uploaded, "unchanged meta/tasks.parquet uploaded again"
    assert set(uploaded) <= {tree2[p] for p in changed}, "an unchanged file was uploaded again"
    assert tree2["data/chunk-000/file-000.parquet"] in uploaded
    # the Hub now serves the edited data
    fresh = open_dataset(repo_id, token=TOKEN, root=tmp_path / "hub", progress=False)
    assert fresh.meta.source.get("commit") == sha2
    assert_same_frames(fresh, edited, "after the incremental push")


@pytest.fixture
def small_push_files(monkeypatch):
    """push() exports with the default 100 MB data files; make it export with 1 MB files (a wrapper passing
    data_files_size_in_mb=1 to lerobot_zarr.writing.export.to_lerobot) so that a few MB give several data files."""
    real_to_lerobot = export_module.to_lerobot

    def small_files(dataset, path, **kwargs):
        kwargs["data_files_size_in_mb"] = 1
        return real_to_lerobot(dataset, path, **kwargs)

    monkeypatch.setattr(export_module, "to_lerobot", small_files)


def test_incremental_push_uploads_only_the_changed_data_file(hub, env, builds, tmp_path, small_push_files):
    src = builds.source("gen_big")
    store = tmp_path / "store"
    open_dataset(src, root=store, progress=False)
    repo_id = "alice/incremental-big"
    sha1 = LeRobotZarrDataset(store).push(repo_id, token=TOKEN, progress=False)
    tree1 = _tree(hub, repo_id)
    data_files = sorted(p for p in tree1 if p.startswith("data/"))
    assert len(data_files) >= 3, (f"push() did not export with 1 MB files (the test's wrapper of "
                                  f"export.to_lerobot was not used?): {data_files}")  # fmt: skip
    episodes = pq.read_table(io.BytesIO(hub.get_file(repo_id, "meta/episodes/chunk-000/file-000.parquet")))
    file_of = [DATA_PATH.format(chunk_index=c, file_index=f) for c, f in
               zip(episodes.column("data/chunk_index").to_pylist(), episodes.column("data/file_index").to_pylist())]
    target = data_files[len(data_files) // 2]
    episode = file_of.index(target)

    _edit_store(store, episode=episode)
    hub.reset_stats()
    sha2 = LeRobotZarrDataset(store).push(repo_id, token=TOKEN, progress=False)
    assert sha2 is not None and [c["id"] for c in hub.commits(repo_id)][:2] == [sha2, sha1]
    tree2 = _tree(hub, repo_id)
    changed_data = sorted(p for p in tree2 if p.startswith("data/") and tree2[p] != tree1.get(p))
    assert changed_data == [target], f"episode {episode} lives in {target}; changed data files {changed_data}"
    uploaded = _put_oids(hub)
    for rel in data_files:
        if rel != target:
            assert tree1[rel] not in uploaded, f"unchanged {rel} uploaded again"
    assert tree2[target] in uploaded
    sizes = {rel: len(hub.get_file(repo_id, rel)) for rel in tree2}
    changed = {p for p in tree2 if tree2[p] != tree1.get(p)}
    assert sum(uploaded.values()) <= sum(sizes[p] for p in changed), (
        f"uploaded {sum(uploaded.values())} B, the changed files hold {sum(sizes[p] for p in changed)} B")
    unchanged_data = sum(sizes[p] for p in data_files if p != target)
    put_and_commit = sum(r.bytes_received for r in lib_requests(hub) if r.method in ("PUT", "POST"))
    assert put_and_commit < sizes[target] + unchanged_data / 2, \
        f"{put_and_commit} B sent for one changed data file of {sizes[target]} B"


def test_push_of_fewer_data_files_deletes_the_stale_ones(hub, env, builds, tmp_path, small_push_files):
    repo_id = "alice/shrink"
    big = open_dataset(builds.source("gen_big"), root=tmp_path / "big", progress=False)
    sha1 = big.push(repo_id, token=TOKEN, progress=False)
    assert len([p for p in hub.list_files(repo_id) if p.startswith("data/")]) >= 3
    # the same kind of recording (same features), fewer episodes: fewer data files
    small_src = write_sample_dataset(tmp_path / "small_src", n_episodes=3, lengths=(250, 300), state_dim=128,
                                     action_dim=128, seed=15)  # fmt: skip
    small = open_dataset(small_src, root=tmp_path / "small", progress=False)
    sha2 = small.push(repo_id, token=TOKEN, progress=False)
    assert sha2 is not None and [c["id"] for c in hub.commits(repo_id)][:2] == [sha2, sha1]
    local = _files(export_module.to_lerobot(small, tmp_path / "small_export", data_files_size_in_mb=1,
                                            progress=False))  # fmt: skip
    assert hub.list_files(repo_id) == sorted(local), "stale files of the bigger dataset left in the repo"
    assert all(hub.get_file(repo_id, rel) == data for rel, data in local.items())
    assert hub.refs(repo_id)["tags"][TAG] == sha2
    fresh = open_dataset(repo_id, token=TOKEN, root=tmp_path / "hub", progress=False)
    assert_same_frames(fresh, small, "after pushing the smaller dataset")


# ------------------------------------------------------------------------------------------------ errors


def test_push_without_a_token_raises_hub_auth_error(hub, env, builds):
    b = builds.get("gen_png")
    for token in (None, "not-a-token"):
        repo_id = "alice/no-auth"
        with pytest.raises(HubAuthError) as info:
            b.ds.push(repo_id, token=token, progress=False)
        assert isinstance(info.value, PermissionError)
        assert repo_id in str(info.value), str(info.value)
    with pytest.raises(ValueError):  # nothing was created
        hub.refs("alice/no-auth")
    assert not hub.requests("PUT")


def test_push_to_a_repo_holding_another_dataset_is_refused(hub, env, builds, tmp_path):
    other = _generate("gen_other", tmp_path / "other")
    repo_id = "alice/taken"
    hub.add_repo(repo_id, other, tags=[TAG])
    before = _remote_state(hub, repo_id)
    b = builds.get("gen_png")
    with pytest.raises(SourceMismatchError) as info:
        b.ds.push(repo_id, token=TOKEN, progress=False)
    message = str(info.value)
    assert repo_id in message and "features" in message, message
    assert _remote_state(hub, repo_id) == before, "the remote changed"
    assert not hub.requests("PUT") and not hub.requests("POST", "/commit/")


def test_interrupted_push_leaves_the_remote_unchanged(hub, env, builds, tmp_path):
    b = builds.get("gen_png")
    # an update interrupted at the commit: the remote keeps its previous revision, whole
    store = _copy_store(b.ds, tmp_path / "store")
    repo_id = "alice/interrupted"
    sha1 = LeRobotZarrDataset(store).push(repo_id, token=TOKEN, progress=False)
    before = _remote_state(hub, repo_id)
    _edit_store(store, episode=1)
    hub.inject_fault(path_contains="/commit/", kind="500", count=1000, method="POST")
    with pytest.raises(lerobot_zarr.HubError, match="remote is unchanged"):
        LeRobotZarrDataset(store).push(repo_id, token=TOKEN, progress=False)
    assert hub.requests("POST", "/commit/"), "the push never reached the commit endpoint"
    assert _remote_state(hub, repo_id) == before, "the interrupted push changed the remote"
    assert hub.refs(repo_id)["tags"][TAG] == sha1
    # a push of a new repo interrupted at the commit: no files and no v3.0 tag appear
    fresh = "alice/interrupted-new"
    with pytest.raises(lerobot_zarr.HubError):
        b.ds.push(fresh, token=TOKEN, progress=False)
    assert hub.list_files(fresh) == [] and TAG not in hub.refs(fresh)["tags"]
    # once the server recovers, the same push goes through in one commit
    hub.clear_faults()
    sha2 = LeRobotZarrDataset(store).push(repo_id, token=TOKEN, progress=False)
    assert [c["id"] for c in hub.commits(repo_id)][:2] == [sha2, sha1]


def test_push_server_error_is_a_hub_error_naming_the_repo(hub, env, builds, monkeypatch, capsys):
    """A server that keeps failing the commit: lerobot_zarr.HubError (the package's error for failed Hub requests),
    and the CLI reports it as an error (exit 1) instead of a traceback."""
    b = builds.get("gen_png")
    repo_id = "alice/server-error"
    hub.inject_fault(path_contains="/commit/", kind="500", count=1000, method="POST")
    with pytest.raises(lerobot_zarr.LeRobotZarrError) as info:
        b.ds.push(repo_id, token=TOKEN, progress=False)
    assert isinstance(info.value, lerobot_zarr.HubError), type(info.value)
    assert repo_id in str(info.value), str(info.value)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    capsys.readouterr()
    assert cli_main(["push", str(b.ds.root), repo_id]) == 1
    assert repo_id in capsys.readouterr().err


def test_to_lerobot_of_a_partial_store_raises_not_materialized(builds, tmp_path):
    src = builds.source("gen_png")
    ds = open_dataset(src, root=tmp_path / "store", episodes=[0], progress=False)
    out = tmp_path / "exports" / "out"
    with pytest.raises(NotMaterializedError):
        ds.to_lerobot(out, progress=False)
    assert not out.exists()
    assert files_under(tmp_path / "exports") == [], "leftovers of the failed export"


def test_push_of_a_partial_store_raises_before_touching_the_hub(hub, env, builds, tmp_path):
    ds = open_dataset(builds.source("gen_png"), root=tmp_path / "store", episodes=[0, 2], progress=False)
    with pytest.raises(NotMaterializedError):
        ds.push("alice/partial", token=TOKEN, progress=False)
    with pytest.raises(ValueError):  # no repo was created
        hub.refs("alice/partial")
    assert lib_requests(hub) == []


def test_to_lerobot_into_a_non_empty_folder_raises_and_leaves_it_alone(builds, tmp_path):
    b = builds.get("gen_png")
    out = tmp_path / "parent" / "out"
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("mine")
    (out / "meta").mkdir()
    (out / "meta" / "info.json").write_text("{}")
    before = _files(out)
    with pytest.raises(StoreExistsError):
        b.ds.to_lerobot(out, progress=False)
    assert _files(out) == before
    assert sorted(p.name for p in (tmp_path / "parent").iterdir()) == ["out"], "leftovers next to the folder"
    # an existing empty folder is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    b.ds.to_lerobot(empty, progress=False)
    assert _files(empty) == _files(b.export)


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_push(hub, env, builds, monkeypatch, capsys):
    b = builds.get("gen_png")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert cli_main(["push", str(b.ds.root), "alice/ds2"]) == 0
    refs = hub.refs("alice/ds2")
    assert refs["tags"].get(TAG) == refs["branches"]["main"]
    assert hub.list_files("alice/ds2") == sorted(_files(b.export))
    assert "alice/ds2" in capsys.readouterr().out
    # unchanged: "no change", exit 0
    assert cli_main(["push", str(b.ds.root), "alice/ds2"]) == 0
    assert len(hub.commits("alice/ds2")) == 2  # the repo's initial commit + the push
    # without a token: an error naming the repo, exit 1
    monkeypatch.delenv("HF_TOKEN")
    capsys.readouterr()
    assert cli_main(["push", str(b.ds.root), "alice/ds3"]) == 1
    assert "alice/ds3" in capsys.readouterr().err


def test_a_dataset_without_episodes_is_refused_before_touching_the_hub(hub, env, builds, tmp_path):
    ds = open_dataset(builds.source("gen_png"), root=tmp_path / "store", mode="r+", progress=False)
    ds.delete_episodes(list(range(ds.meta.total_episodes - 1)))
    ds.delete_episodes([0])
    assert ds.meta.total_episodes == 0
    hub.reset_stats()
    with pytest.raises(EmptyStoreError, match="no episodes: nothing to export or push"):
        ds.push("alice/empty", token=TOKEN, progress=False)
    with pytest.raises(StoreError, match="no episodes"):
        ds.to_lerobot(tmp_path / "out", progress=False)
    ds.close()
    assert lib_requests(hub) == [], "the Hub was not touched"
    with pytest.raises(ValueError):  # no repo was created
        hub.refs("alice/empty")
    assert not (tmp_path / "out").exists()


def test_export_warnings_are_ours_and_point_at_the_caller(builds, tmp_path):
    ds = open_dataset(builds.source("gen_png"), root=tmp_path / "store", progress=False)
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match=r"exporting 2 of the store's") as caught:
        ds.select([0, 2]).to_lerobot(tmp_path / "out", progress=False)
    assert all(w.filename == __file__ for w in caught), [w.filename for w in caught]


def test_a_camera_dropped_from_the_store_is_named_when_exporting(tmp_path):
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    src = write_sample_dataset(tmp_path / "src", n_episodes=3, lengths=(5, 8), video_keys=["observation.images.cam"],
                               write_videos=False)  # info.json lists the camera, no mp4 exists
    ds = open_dataset(src, root=tmp_path / "mine", mode="r+", progress=False)
    assert "observation.images.cam" in ds.meta.not_materialized and list(ds.left_out) == ["observation.images.cam"]
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match=r"'observation.images.cam' of the source is not in the "
                                                             r"store, so not in the export"):
        out = ds.to_lerobot(tmp_path / "out", progress=False)
    assert "observation.images.cam" not in json.loads((out / "meta/info.json").read_text())["features"]
    ds.close()
