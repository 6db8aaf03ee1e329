"""End-to-end checks of open_dataset on the real LeRobot datasets in ../shared/datasets.

Every value the store returns is compared bit for bit with an independent reference built here from the source
folder with nothing but pyarrow and json (no code shared with lerobot_zarr). The source folders are only read:
stores are written to a temporary folder, one per dataset and session.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import G1_CAM, G1_SMALL

import lerobot_zarr  # noqa: F401  (sets the zarr rectilinear-chunks switch before anything else touches zarr)
from lerobot_zarr import open_dataset

DATASETS_DIR = Path(__file__).parents[1] / ".." / "shared" / "datasets"
if not DATASETS_DIR.is_dir():
    pytest.skip(f"real LeRobot datasets not found at {DATASETS_DIR.resolve()}; skipping real-dataset tests",
                allow_module_level=True)
DATASETS_DIR = DATASETS_DIR.resolve()

NAMES = ["record-test", "open_50", "G1-policy-train"]
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


# ---------------------------------------------------------------------------------------------------------------
# Independent reference: pyarrow + json only
# ---------------------------------------------------------------------------------------------------------------
def _json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class Reference:
    info: dict
    version: int  # major codebase version
    frames: dict[str, np.ndarray]  # feature -> (total_frames, ...) in global index order
    tasks: dict[int, str]  # task_index -> task text
    lengths: np.ndarray  # episode lengths from meta, by episode_index

    @property
    def numeric(self) -> list[str]:
        return [k for k, f in self.info["features"].items() if f["dtype"] not in ("video", "image", "string")]

    @property
    def videos(self) -> list[str]:
        return [k for k, f in self.info["features"].items() if f["dtype"] == "video"]

    def episode_rows(self, e: int) -> np.ndarray:
        return np.flatnonzero(self.frames["episode_index"] == e)


def _read_tasks(src: Path, version: int) -> dict[int, str]:
    if version >= 3:
        table = pq.read_table(src / "meta" / "tasks.parquet")
        pandas_meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
        index_cols = [c for c in pandas_meta.get("index_columns", []) if isinstance(c, str)]
        text_col = index_cols[0] if index_cols else "task"
        return dict(zip(table.column("task_index").to_pylist(), table.column(text_col).to_pylist(), strict=True))
    return {r["task_index"]: r["task"] for r in _jsonl(src / "meta" / "tasks.jsonl")}


def _read_lengths(src: Path, version: int) -> np.ndarray:
    if version >= 3:
        rows = []
        for f in sorted((src / "meta" / "episodes").glob("*/*.parquet")):
            t = pq.read_table(f, columns=["episode_index", "length"])
            rows += zip(t.column("episode_index").to_pylist(), t.column("length").to_pylist(), strict=True)
    else:
        rows = [(r["episode_index"], r["length"]) for r in _jsonl(src / "meta" / "episodes.jsonl")]
    rows.sort()
    assert [e for e, _ in rows] == list(range(len(rows))), f"{src}: episode metadata is not 0..N-1"
    return np.array([n for _, n in rows], dtype=np.int64)


def read_reference(src: Path) -> Reference:
    info = _json(src / "meta" / "info.json")
    version = int(str(info["codebase_version"]).lstrip("v").split(".")[0])
    keys = [k for k, f in info["features"].items() if f["dtype"] not in ("video", "image", "string")]
    pieces: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    files = sorted((src / "data").glob("*/*.parquet"))
    assert files, f"{src}: no data parquet files"
    for path in files:
        table = pq.read_table(path)
        for k in keys:
            pieces[k].append(np.array(table.column(k).to_pylist(), dtype=np.dtype(info["features"][k]["dtype"])))
    frames = {k: np.concatenate(v) for k, v in pieces.items()}
    order = np.argsort(frames["index"], kind="stable")
    frames = {k: v[order] for k, v in frames.items()}
    return Reference(info, version, frames, _read_tasks(src, version), _read_lengths(src, version))


def assert_same_bits(actual, expected: np.ndarray, what: str) -> None:
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    if actual.tobytes() != expected.tobytes():
        a = actual.reshape(len(actual), -1).view(np.uint8) if actual.ndim else actual.reshape(1, -1)
        b = expected.reshape(len(expected), -1).view(np.uint8) if expected.ndim else expected.reshape(1, -1)
        bad = np.flatnonzero((a != b).any(axis=1))
        i = int(bad[0])
        raise AssertionError(f"{what}: {len(bad)} frame(s) differ; first at position {i}: "
                             f"{actual.reshape(len(a), -1)[i]!r} != {expected.reshape(len(b), -1)[i]!r}")


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


# ---------------------------------------------------------------------------------------------------------------
# Fixtures: each dataset transcoded once per session into a temporary folder
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stores_dir(module_tmp) -> Path:
    return module_tmp


@dataclass
class Case:
    name: str
    src: Path
    store: Path
    ds: object
    ref: Reference
    source_snapshot: dict


def _source(name: str) -> Path:
    src = DATASETS_DIR / name
    if not (src / "meta" / "info.json").is_file():
        pytest.skip(f"dataset {name} not present in {DATASETS_DIR}")
    return src


@pytest.fixture(scope="module", params=NAMES)
def case(request, stores_dir) -> Case:
    src = _source(request.param)
    snapshot = _snapshot(src)
    store = stores_dir / request.param
    # these tests read the numeric features: G1's camera (decoded where its mp4 exists) is kept small
    small = {G1_CAM: G1_SMALL} if request.param == "G1-policy-train" else None
    ds = open_dataset(src, root=store, progress=False, resize=small)
    return Case(request.param, src, store, ds, read_reference(src), snapshot)


@pytest.fixture(scope="module")
def record_test(stores_dir) -> Case:
    src = _source("record-test")
    snapshot = _snapshot(src)
    store = stores_dir / "record-test-own"
    ds = open_dataset(src, root=store, progress=False)
    return Case("record-test", src, store, ds, read_reference(src), snapshot)


# ---------------------------------------------------------------------------------------------------------------
# Per-dataset checks
# ---------------------------------------------------------------------------------------------------------------
def test_reference_is_consistent(case: Case):
    """Sanity of the reference itself: a contiguous global index and per-episode counts matching meta."""
    ref = case.ref
    n = ref.info["total_frames"]
    assert np.array_equal(ref.frames["index"], np.arange(n)), f"{case.name}: parquet index is not 0..{n - 1}"
    counts = np.bincount(ref.frames["episode_index"], minlength=len(ref.lengths))
    assert np.array_equal(counts, ref.lengths), f"{case.name}: frames per episode in data differ from meta"


def test_length_and_episode_table(case: Case):
    ds, ref = case.ds, case.ref
    assert len(ds) == ref.info["total_frames"], f"{case.name}: len(ds)={len(ds)}, info.json total_frames=" \
                                                f"{ref.info['total_frames']}"
    assert ds.meta.total_episodes == ref.info["total_episodes"] == len(ref.lengths)
    assert np.array_equal(ds.meta.episode_length, ref.lengths), \
        f"{case.name}: episode lengths {ds.meta.episode_length.tolist()[:10]}... != meta {ref.lengths.tolist()[:10]}..."
    starts = np.concatenate([[0], np.cumsum(ref.lengths)[:-1]])
    assert np.array_equal(ds.meta.episode_start, starts), f"{case.name}: episode_start wrong"
    assert np.array_equal(ds.meta.episode_end, starts + ref.lengths), f"{case.name}: episode_end wrong"
    for e in range(len(ref.lengths)):
        rows = ref.episode_rows(e)
        assert ds.meta.episode_start[e] == ref.frames["index"][rows[0]], f"{case.name}: episode {e} start"
    assert ds.meta.fps == ref.info["fps"]
    want = json.loads(json.dumps(ref.info["features"]))
    if case.name == "G1-policy-train":  # stored resized (see `case`): info says so
        want[G1_CAM]["shape"] = [*G1_SMALL, 3]
    assert ds.meta.features == want, f"{case.name}: meta.features differs from info.json"


def test_episode_memmaps_bit_exact(case: Case):
    ds, ref = case.ds, case.ref
    for e in range(len(ref.lengths)):
        arrays = ds.episode(e)
        assert set(arrays) == set(ref.numeric), \
            f"{case.name}: episode({e}) keys {sorted(arrays)} != numeric features {sorted(ref.numeric)}"
        rows = ref.episode_rows(e)
        for k in ref.numeric:
            assert isinstance(arrays[k], np.memmap), f"{case.name}: episode({e})[{k!r}] is not a memmap"
            assert not arrays[k].flags.writeable, f"{case.name}: episode({e})[{k!r}] is writeable"
            assert_same_bits(arrays[k], ref.frames[k][rows], f"{case.name} episode {e} {k}")


def test_get_batch_all_frames_bit_exact(case: Case):
    ds, ref = case.ds, case.ref
    batch = ds.get_batch(np.arange(len(ds)))
    for k in ref.numeric:
        assert k in batch, f"{case.name}: get_batch lacks {k!r}"
        assert_same_bits(batch[k], ref.frames[k], f"{case.name} get_batch {k}")
    expected_tasks = [ref.tasks[t] for t in ref.frames["task_index"].tolist()]
    assert list(batch["task"]) == expected_tasks, f"{case.name}: task strings from get_batch differ"
    for v in ref.videos:
        assert v not in batch, f"{case.name}: video feature {v!r} present in get_batch output"


def test_getitem_sample_bit_exact(case: Case):
    ds, ref = case.ds, case.ref
    n = len(ds)
    rng = np.random.default_rng(0)
    ends = np.cumsum(ref.lengths)
    sample = sorted(set(rng.integers(0, n, 150).tolist()) | set((ends - 1).tolist())
                    | set((ends - ref.lengths).tolist()))
    for i in sample:
        item = ds[i]
        assert set(item) == set(ref.numeric) | {"task"}, \
            f"{case.name}: ds[{i}] keys {sorted(item)} != numeric features + task"
        for k in ref.numeric:
            assert_same_bits(np.asarray(item[k])[None], ref.frames[k][i:i + 1], f"{case.name} ds[{i}][{k!r}]")
        task = ref.tasks[int(ref.frames["task_index"][i])]
        assert item["task"] == task, f"{case.name}: ds[{i}]['task']={item['task']!r}, expected {task!r}"
        assert isinstance(item["task"], str)
    # negative indexing, like a sequence
    last = ds[-1]
    assert int(last["index"]) == n - 1


def test_index_columns_semantics(case: Case):
    """timestamp/frame_index/episode_index/index behave as LeRobot defines them."""
    ds, ref = case.ds, case.ref
    batch = ds.get_batch(np.arange(len(ds)))
    assert np.array_equal(batch["index"], np.arange(len(ds)))
    for e in range(len(ref.lengths)):
        s, t = int(ds.meta.episode_start[e]), int(ds.meta.episode_end[e])
        assert (batch["episode_index"][s:t] == e).all(), f"{case.name}: episode_index wrong in episode {e}"
        assert np.array_equal(batch["frame_index"][s:t], np.arange(t - s)), f"{case.name}: frame_index ep {e}"


def _video_file(ref: Reference, src: Path, key: str, e: int) -> Path:
    """Where info.json's video_path template puts camera ``key`` of episode ``e`` (json and pyarrow only)."""
    info = ref.info
    if ref.version >= 3:
        rows = {}
        for f in sorted((src / "meta" / "episodes").glob("*/*.parquet")):
            t = pq.read_table(f, columns=["episode_index", f"videos/{key}/chunk_index", f"videos/{key}/file_index"])
            rows.update({r["episode_index"]: r for r in t.to_pylist()})
        return src / info["video_path"].format(video_key=key, chunk_index=rows[e][f"videos/{key}/chunk_index"],
                                               file_index=rows[e][f"videos/{key}/file_index"])
    return src / info["video_path"].format(episode_chunk=e // info["chunks_size"], video_key=key, episode_index=e)


def test_missing_videos_reported_unavailable(case: Case):
    """These datasets ship without (most of) their mp4 files: each camera is stored, its episodes without a video
    are unavailable with a reason naming the missing file, and the camera is left out of samples of a selection
    holding such episodes (here: all episodes). Every other feature is there (the tests above)."""
    ds, ref = case.ds, case.ref
    assert ref.videos, f"{case.name}: expected the dataset to declare video features"
    assert ds.meta.not_materialized == {}, f"{case.name}: not_materialized {ds.meta.not_materialized}"
    assert set(ds.meta.unavailable) == set(ref.videos) == set(ds.left_out), \
        f"{case.name}: unavailable {sorted(ds.meta.unavailable)}, left out {sorted(ds.left_out)}"
    for v in ref.videos:
        files = [_video_file(ref, case.src, v, e) for e in range(len(ref.lengths))]
        missing = [e for e, f in enumerate(files) if not f.is_file()]
        assert missing, f"{case.name}: every video of {v!r} is there; the test expects missing ones"
        reasons = ds.meta.unavailable[v]
        assert sorted(reasons) == missing, f"{case.name}: {v!r} unavailable in {sorted(reasons)[:10]}, " \
                                           f"missing files for {missing[:10]}"
        for e in missing[:5] + missing[-5:]:
            assert str(files[e]) in reasons[e] and "not found" in reasons[e], f"{case.name}: {reasons[e]!r}"
        assert v in ds.meta.stored_features and v not in ds.array_specs
        assert v not in ds[0], f"{case.name}: video feature {v!r} present in ds[0]"
        assert v not in ds.episode(0), f"{case.name}: video feature {v!r} present in ds.episode(0)"


def test_stats(case: Case):
    ds, ref, src = case.ds, case.ref, case.src
    stats_path = src / "meta" / "stats.json"
    if ref.version >= 3:
        assert stats_path.is_file()
        assert ds.meta.stats == _json(stats_path), f"{case.name}: meta.stats differs from meta/stats.json"
        return
    assert not stats_path.exists()
    n = ref.info["total_frames"]
    for key in ("observation.state", "action"):
        assert key in ds.meta.stats, f"{case.name}: merged stats lack {key!r} (have {sorted(ds.meta.stats)})"
        s = ds.meta.stats[key]
        values = ref.frames[key]
        np.testing.assert_allclose(np.asarray(s["mean"], dtype=np.float64), values.astype(np.float64).mean(axis=0),
                                   rtol=1e-5, atol=1e-7, err_msg=f"{case.name}: merged mean of {key}")
        np.testing.assert_allclose(np.asarray(s["std"], dtype=np.float64), values.astype(np.float64).std(axis=0),
                                   rtol=1e-4, atol=1e-7, err_msg=f"{case.name}: merged std of {key}")
        assert np.array_equal(np.asarray(s["min"], dtype=np.float64), values.min(axis=0).astype(np.float64)), \
            f"{case.name}: merged min of {key} differs from the data minimum"
        assert np.array_equal(np.asarray(s["max"], dtype=np.float64), values.max(axis=0).astype(np.float64)), \
            f"{case.name}: merged max of {key} differs from the data maximum"
        assert list(np.asarray(s["count"]).reshape(-1)) == [n], f"{case.name}: merged count {s['count']} != [{n}]"


def test_source_folder_untouched(case: Case):
    assert _snapshot(case.src) == case.source_snapshot, f"{case.name}: the source folder was modified"
    assert not case.store.resolve().is_relative_to(DATASETS_DIR)


# ---------------------------------------------------------------------------------------------------------------
# Store reuse and episode subsets (record-test)
# ---------------------------------------------------------------------------------------------------------------
def _store_files(store: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(store).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in store.rglob("*") if p.is_file() and p.name != ".lock"}


def test_reopen_reuses_store(record_test: Case):
    before = _store_files(record_test.store)
    chunk_files = [k for k in before if "/c/" in k]
    assert len(chunk_files) >= len(record_test.ref.numeric) * len(record_test.ref.lengths), \
        f"expected one chunk file per feature and episode, found {len(chunk_files)}"
    time.sleep(0.05)
    again = open_dataset(record_test.src, root=record_test.store, progress=False)
    after = _store_files(record_test.store)
    changed = sorted(k for k in before if after.get(k) != before[k])
    assert not changed, f"second open rewrote {changed[:10]}"
    assert set(after) == set(before), f"second open added/removed files: {sorted(set(after) ^ set(before))}"
    assert len(again) == len(record_test.ds)
    assert_same_bits(again.get_batch(np.arange(len(again)))["action"], record_test.ref.frames["action"],
                     "reopened store action")


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-store", "existing-full-store"])
def test_episode_subset_keeps_original_indices(record_test: Case, stores_dir: Path, fresh: bool):
    ref = record_test.ref
    root = stores_dir / "record-test-subset" if fresh else record_test.store
    ds = open_dataset(record_test.src, root=root, episodes=[1, 3], progress=False)
    expected_rows = np.concatenate([ref.episode_rows(1), ref.episode_rows(3)])
    assert len(ds) == ref.lengths[1] + ref.lengths[3] == len(expected_rows), \
        f"len={len(ds)}, expected {ref.lengths[1]} + {ref.lengths[3]}"
    batch = ds.get_batch(np.arange(len(ds)))
    for k in ref.numeric:
        assert_same_bits(batch[k], ref.frames[k][expected_rows], f"subset [1, 3] {k}")
    first = ds[0]
    assert int(first["episode_index"]) == 1 and int(first["index"]) == ref.lengths[0], \
        f"ds[0] of subset: episode_index={first['episode_index']}, index={first['index']}"
    j = int(ref.lengths[1])
    item = ds[j]
    assert int(item["episode_index"]) == 3, f"ds[{j}] of subset has episode_index {item['episode_index']}"
    assert int(item["index"]) == int(ref.lengths[:3].sum()), f"ds[{j}] of subset has index {item['index']}"
    assert int(item["frame_index"]) == 0
    last = ds[len(ds) - 1]
    assert int(last["index"]) == ref.info["total_frames"] - 1
    for e in (1, 3):
        assert_same_bits(ds.episode(e)["observation.state"], ref.frames["observation.state"][ref.episode_rows(e)],
                         f"subset episode({e})")
