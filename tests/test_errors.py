"""Error handling: every failure raises a lerobot_zarr exception that also is the builtin it refines, and whose
message names the file, episode or feature concerned. Nothing is written where it should not be.

Sources are synthetic (``write_sample_dataset``) and damaged in a temporary folder; a few tests copy the real
datasets of ../shared/datasets (read-only) to a temporary folder first and are skipped when they are absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lerobot_zarr import (
    CorruptSourceError,
    DeltaTimestampsError,
    FrameIndexError,
    LeRobotZarrDataset,
    LeRobotZarrError,
    LeRobotZarrWarning,
    NotMaterializedError,
    SchemaMismatchError,
    SourceNotFoundError,
    StoreError,
    StoreLockedError,
    UnsupportedStoreError,
    open_dataset,
)
from lerobot_zarr.store import WriterLock, chunk_path
from lerobot_zarr.testing.sample_data import write_sample_dataset

REPO = Path(__file__).resolve().parents[1]
REAL_DATASETS = (REPO / ".." / "shared" / "datasets").resolve()
LENGTHS = [10, 12, 14, 16]  # 52 frames; episode e starts at sum(LENGTHS[:e])
N_FRAMES = sum(LENGTHS)
VIDEO_KEY = "observation.images.cam"
V3_FILE0 = "data/chunk-000/file-000.parquet"


# ---------------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------------
def make_source(path: Path, **kwargs) -> Path:
    kwargs.setdefault("n_episodes", len(LENGTHS))
    kwargs.setdefault("lengths", LENGTHS)
    return write_sample_dataset(path, **kwargs)


def open_(source, root=None, **kwargs):
    return open_dataset(source, root=root, progress=False, **kwargs)


def raises(exc_type, builtin, func, *args, **kwargs) -> str:
    """Call ``func``; assert it raises ``exc_type`` (a LeRobotZarrError that also is ``builtin``); return the message."""
    with pytest.raises(exc_type) as info:
        func(*args, **kwargs)
    assert isinstance(info.value, LeRobotZarrError), type(info.value).__mro__
    assert isinstance(info.value, builtin), type(info.value).__mro__
    return str(info.value)


def edit_info(source: Path, edit) -> None:
    path = source / "meta" / "info.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info, indent=2))


def edit_parquet(path: Path, edit) -> None:
    table = pq.read_table(path)
    pq.write_table(edit(table), path)


def replace_column(table: pa.Table, name: str, values: list) -> pa.Table:
    i = table.schema.get_field_index(name)
    field = table.schema.field(i)
    return table.set_column(i, field, pa.array(values, field.type))


def rename_column(table: pa.Table, old: str, new: str) -> pa.Table:
    return table.rename_columns([new if n == old else n for n in table.column_names])


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every entry under ``folder`` with its content digest and mtime."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_file():
            out[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        else:
            out[rel] = ("dir", 0)
    return out


def real_dataset(name: str, tmp_path: Path, *, skip_videos: bool = True) -> Path:
    src = REAL_DATASETS / name
    if not (src / "meta" / "info.json").is_file():
        pytest.skip(f"real dataset {name!r} not found at {src}; skipping (needs ../shared/datasets)")
    dst = tmp_path / name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("videos", "video") if skip_videos else None)
    return dst


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """A healthy v3.0 source with a video feature, and its complete store (shared, never damaged)."""
    base = tmp_path_factory.mktemp("sample")
    src = make_source(base / "src", video_keys=(VIDEO_KEY,))
    store = base / "store"
    ds = open_(src, store)
    return src, store, ds


# ---------------------------------------------------------------------------------------------------------------
# source not found / not a dataset
# ---------------------------------------------------------------------------------------------------------------
def test_source_folder_does_not_exist(tmp_path):
    missing = tmp_path / "no_such_dataset"
    msg = raises(SourceNotFoundError, FileNotFoundError, open_, missing, tmp_path / "store")
    assert str(missing) in msg
    assert not (tmp_path / "store").exists()


def test_folder_without_info_json(tmp_path):
    folder = tmp_path / "almost"
    (folder / "meta").mkdir(parents=True)
    (folder / "data").mkdir()
    msg = raises(SourceNotFoundError, FileNotFoundError, open_, folder, tmp_path / "store")
    assert str(folder) in msg and "info.json" in msg
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("kind", ["file", "junk_folder"])
def test_path_neither_dataset_nor_store(tmp_path, kind):
    if kind == "file":
        path = tmp_path / "notes.txt"
        path.write_text("hello")
    else:
        path = tmp_path / "junk"
        path.mkdir()
        (path / "a.bin").write_bytes(b"\0" * 10)
    before = snapshot(tmp_path)
    msg = raises(SourceNotFoundError, FileNotFoundError, open_, path)
    assert str(path) in msg
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------------------------------------------------------
# info.json
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["{not json", "", "\xff\xfe garbage"])
def test_info_json_invalid(tmp_path, text):
    src = make_source(tmp_path / "src")
    (src / "meta" / "info.json").write_bytes(text.encode("latin-1"))
    msg = raises(CorruptSourceError, ValueError, open_, src, tmp_path / "store")
    assert str(src / "meta" / "info.json") in msg


def test_info_json_not_an_object(tmp_path):
    src = make_source(tmp_path / "src")
    (src / "meta" / "info.json").write_text("[1, 2, 3]")
    msg = raises(CorruptSourceError, ValueError, open_, src, tmp_path / "store")
    assert "info.json" in msg


def test_codebase_version_v1_refused(tmp_path):
    src = make_source(tmp_path / "src")
    edit_info(src, lambda info: info.update(codebase_version="v1.6"))
    msg = raises(CorruptSourceError, ValueError, open_, src, tmp_path / "store")
    assert "info.json" in msg and "v1.6" in msg
    assert not (tmp_path / "store").exists()


def test_codebase_v31_with_unknown_keys_tolerated(tmp_path):
    src = make_source(tmp_path / "src")

    def edit(info):
        info["codebase_version"] = "v3.1"
        info["some_future_key"] = {"nested": [1, 2, 3]}
        info["features"]["observation.state"]["future_attribute"] = {"unit": "rad"}
        info["features"]["action"]["another"] = 42

    edit_info(src, edit)
    ds = open_(src, tmp_path / "store")
    assert len(ds) == N_FRAMES
    ref = pq.read_table(src / V3_FILE0, columns=["observation.state"]).column(0).to_pylist()
    np.testing.assert_array_equal(ds[13]["observation.state"], np.asarray(ref[13], dtype=np.float32))
    assert ds.meta.info["codebase_version"] == "v3.1"


# ---------------------------------------------------------------------------------------------------------------
# data parquet files: truncated, garbage, missing
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["truncate", "garbage", "random"])
@pytest.mark.parametrize("which", [0, 1])
def test_corrupt_data_parquet(tmp_path, damage, which):
    src = make_source(tmp_path / "src", episodes_per_file=2)
    bad = src / f"data/chunk-000/file-{which:03d}.parquet"
    raw = bytearray(bad.read_bytes())
    if damage == "truncate":
        bad.write_bytes(bytes(raw[: len(raw) // 2]))
    elif damage == "garbage":
        for i in range(4, len(raw) // 2):
            raw[i] = (raw[i] * 7 + 13) & 0xFF
        bad.write_bytes(bytes(raw))
    else:
        bad.write_bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8).tobytes())
    msg = raises(CorruptSourceError, ValueError, open_, src, tmp_path / "store")
    assert str(bad) in msg


@pytest.mark.parametrize("version,rel,episodes", [
    ("v3.0", "data/chunk-000/file-001.parquet", [2, 3]),
    ("v2.1", "data/chunk-000/episode_000002.parquet", [2]),
    ("v2.1", "data/chunk-000/episode_000000.parquet", [0]),
    ("v3.0", "data/chunk-000/file-000.parquet", [0, 1]),
])
def test_missing_data_file_names_file_and_episode(tmp_path, version, rel, episodes):
    kwargs = {"episodes_per_file": 2} if version == "v3.0" else {}
    src = make_source(tmp_path / "src", version=version, **kwargs)
    (src / rel).unlink()
    msg = raises(SourceNotFoundError, FileNotFoundError, open_, src, tmp_path / "store")
    assert str(src / rel) in msg
    assert "episode" in msg and str(episodes[0]) in msg.replace(str(src / rel), ""), msg


# ---------------------------------------------------------------------------------------------------------------
# schema mismatches and nulls
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("vector_type", ["fixed_size_list", "list"])
def test_declared_shape_disagrees_with_data(tmp_path, vector_type):
    src = make_source(tmp_path / "src", vector_type=vector_type)
    edit_info(src, lambda info: info["features"]["observation.state"].update(shape=[7]))
    msg = raises(SchemaMismatchError, ValueError, open_, src, tmp_path / "store")
    assert "'observation.state'" in msg and str(src / V3_FILE0) in msg
    assert "7" in msg


@pytest.mark.parametrize("version,rel,file_row", [
    ("v2.1", "data/chunk-000/episode_000002.parquet", 5),  # one file per episode: file row 5
    ("v3.0", V3_FILE0, LENGTHS[0] + LENGTHS[1] + 5),  # all episodes in one file: file row 27
])
def test_list_column_with_one_row_of_other_length(tmp_path, version, rel, file_row):
    """Frame 5 of episode 2 holds 5 values instead of 6: the message names that row (of the file) or episode."""
    src = make_source(tmp_path / "src", version=version, vector_type="list")

    def edit(table):
        values = table.column("observation.state").to_pylist()
        values[file_row] = values[file_row][:5]
        return replace_column(table, "observation.state", values)

    edit_parquet(src / rel, edit)
    msg = raises(SchemaMismatchError, ValueError, open_, src, tmp_path / "store")
    assert "'observation.state'" in msg and str(src / rel) in msg
    assert f"row {file_row}" in msg or ("episode 2" in msg and "frame 5" in msg), msg


@pytest.mark.parametrize("where", ["null_row", "null_inner_value", "null_scalar"])
def test_null_values(tmp_path, where):
    src = make_source(tmp_path / "src", vector_type="list" if where == "null_row" else "fixed_size_list")
    feature = "timestamp" if where == "null_scalar" else "observation.state"

    def edit(table):
        values = table.column(feature).to_pylist()
        if where == "null_row":
            values[20] = None
        elif where == "null_inner_value":
            values[20][3] = None
        else:
            values[20] = None
        return replace_column(table, feature, values)

    edit_parquet(src / V3_FILE0, edit)
    msg = raises(CorruptSourceError, ValueError, open_, src, tmp_path / "store")
    assert repr(feature) in msg and str(src / V3_FILE0) in msg and "null" in msg


@pytest.mark.parametrize("dtype", ["complex64", "foo", ["float32"]])
def test_a_feature_of_an_unsupported_dtype_is_left_out_alone(tmp_path, dtype):
    """A dtype LeRobot does not write: that feature is left out (named, with why, and a warning), never the whole
    dataset."""
    src = make_source(tmp_path / "src")
    edit_info(src, lambda info: info["features"]["action"].update(dtype=dtype))
    with pytest.warns(LeRobotZarrWarning, match="'action' is left out"):
        ds = open_(src, tmp_path / "store")
    assert "info.json" in ds.left_out["action"] and repr(dtype)[:20] in ds.left_out["action"]
    assert "action" not in ds[0] and "observation.state" in ds[0]


def test_negative_declared_shape(tmp_path):
    src = make_source(tmp_path / "src")
    edit_info(src, lambda info: info["features"]["action"].update(shape=[-6]))
    with pytest.raises((CorruptSourceError, SchemaMismatchError)) as info:
        open_(src, tmp_path / "store")
    assert isinstance(info.value, ValueError)
    assert "'action'" in str(info.value)


def test_v3_episode_range_disagrees_with_length(tmp_path):
    src = make_source(tmp_path / "src")
    episodes_file = src / "meta/episodes/chunk-000/file-000.parquet"

    def edit(table):
        to = table.column("dataset_to_index").to_pylist()
        to[2] += 3
        return replace_column(table, "dataset_to_index", to)

    edit_parquet(episodes_file, edit)
    msg = raises(SchemaMismatchError, ValueError, open_, src, tmp_path / "store")
    assert "episode 2" in msg and "meta/episodes" in msg


@pytest.mark.parametrize("column", ["episode_index", "index"])
def test_data_rows_disagree_with_episode_table(tmp_path, column):
    src = make_source(tmp_path / "src")
    row = LENGTHS[0] + 4  # frame 4 of episode 1

    def edit(table):
        values = table.column(column).to_pylist()
        values[row] += 1 if column == "episode_index" else 1000
        return replace_column(table, column, values)

    edit_parquet(src / V3_FILE0, edit)
    msg = raises(SchemaMismatchError, ValueError, open_, src, tmp_path / "store")
    assert "episode 1" in msg and str(src / V3_FILE0) in msg
    # episode 0 may have been committed, episode 1 must not be
    ds = LeRobotZarrDataset(tmp_path / "store")
    assert not ds.meta.materialized_episodes[1:].any()


# ---------------------------------------------------------------------------------------------------------------
# paths coming from metadata
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
@pytest.mark.parametrize("template", ["../outside/file-{idx}.parquet", "data/../../outside/file-{idx}.parquet",
                                      "/tmp/outside/file-{idx}.parquet"])
def test_data_path_template_leaving_dataset(tmp_path, version, template):
    src = make_source(tmp_path / "deep" / "src", version=version)
    field = "{file_index:03d}" if version == "v3.0" else "{episode_index:06d}"
    edit_info(src, lambda info: info.update(data_path=template.replace("{idx}", field)))
    outside = tmp_path / "deep" / "outside"
    outside.mkdir()
    shutil.copy(next((src / "data").rglob("*.parquet")), outside / "bait.parquet")
    before = snapshot(tmp_path)
    msg = raises(CorruptSourceError, ValueError, open_, src, tmp_path / "store")
    assert str(src) in msg and "data" in msg
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("template", ["data/{episode_chunk:03d}/x.parquet", "data/{chunk_index", "data/{0}.parquet"])
def test_data_path_template_malformed(tmp_path, template):
    src = make_source(tmp_path / "src")
    edit_info(src, lambda info: info.update(data_path=template))
    msg = raises(CorruptSourceError, ValueError, open_, src, tmp_path / "store")
    assert "data_path" in msg or "info.json" in msg, msg


@pytest.mark.parametrize("name", ["../evil", "../../evil", "a/b", "..", ".hidden", "zarr.json", "episode_start",
                                  "a\\b"])
def test_feature_name_unsafe_as_array_name(tmp_path, name):
    src = make_source(tmp_path / "src")
    edit_info(src, lambda info: info.update(
        features={(name if k == "action" else k): v for k, v in info["features"].items()}))
    edit_parquet(src / V3_FILE0, lambda t: rename_column(t, "action", name))
    store = tmp_path / "a" / "b" / "store"
    store.parent.mkdir(parents=True)
    before_src = snapshot(src)
    msg = raises(UnsupportedStoreError, ValueError, open_, src, store)
    assert repr(name) in msg
    # nothing escaped the store: no "evil" anywhere around, source untouched
    assert not list(tmp_path.rglob("evil")) and not (tmp_path.parent / "evil").exists()
    assert not (store / "a").exists()
    assert snapshot(src) == before_src
    for p in store.parent.parent.parent.iterdir():
        assert p.name in ("src", "a"), p


# ---------------------------------------------------------------------------------------------------------------
# delta_timestamps
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key,deltas,needle", [
    ("action", [0.0, 0.01], "1/fps"),  # 30 fps: 0.01 s is not a frame multiple
    ("action", [-1 / 30, 0.5 / 30], "1/fps"),
    ("observation.nope", [0.0], "unknown"),
    ("action", [], "non-empty"),
    ("action", ["a", "b"], "seconds"),
    ("action", [None], "seconds"),
    ("action", 0.1, "seconds"),
    ("action", [float("nan")], "finite"),
    ("action", [float("inf")], "finite"),
])
def test_bad_delta_timestamps(sample, key, deltas, needle):
    _, store, _ = sample
    msg = raises(DeltaTimestampsError, ValueError, open_, store, delta_timestamps={key: deltas})
    assert repr(key) in msg and needle in msg


def test_good_delta_timestamps_still_work(sample):
    _, store, _ = sample
    ds = open_(store, delta_timestamps={"action": [-1 / 30, 0.0, 2 / 30]})
    item = ds[0]
    assert item["action"].shape == (3, 6)
    assert item["action_is_pad"].tolist() == [True, False, False]


def test_video_feature_in_delta_timestamps_not_materialized(sample):
    src, store, _ = sample
    for source in (src, store):
        msg = raises(NotMaterializedError, LookupError, open_, source,
                     store if source == src else None, delta_timestamps={VIDEO_KEY: [0.0]})
        assert repr(VIDEO_KEY) in msg and "not in the samples" in msg and "no episode has it" in msg, msg


def test_video_not_materialized_message_does_not_blame_missing_source(sample):
    """The source folder is right there: the message must not say it is unavailable."""
    src, store, _ = sample
    assert src.is_dir()
    msg = raises(NotMaterializedError, LookupError, open_, src, store, delta_timestamps={VIDEO_KEY: [0.0]})
    assert "source folder is not available" not in msg, msg


def test_video_key_rest_still_works(sample, tmp_path):
    """The declared video has no mp4: its camera is an array whose every episode is unavailable (with why), left
    out of the samples (one warning per store and process); every other feature samples as usual."""
    _, store, ds = sample
    item = ds[0]
    assert VIDEO_KEY not in item
    assert {"observation.state", "action", "timestamp", "index"} <= set(item)
    assert VIDEO_KEY in ds.meta.features  # still described by the metadata
    assert VIDEO_KEY in ds.meta.stored_features and VIDEO_KEY not in ds.meta.not_materialized
    reasons = ds.meta.unavailable[VIDEO_KEY]
    assert sorted(reasons) == list(range(len(LENGTHS))), reasons
    for e, reason in reasons.items():
        assert f"episode {e}" in reason and repr(VIDEO_KEY) in reason and "not found" in reason, reason
        assert f"videos/{VIDEO_KEY}/chunk-000/file-000.mp4" in reason, reason
    assert VIDEO_KEY in ds.left_out and "unavailable" in ds.left_out[VIDEO_KEY], ds.left_out
    assert ds.meta.materialized_episodes.all()  # the episodes are complete: all but the camera samples
    assert VIDEO_KEY not in ds.get_batch([0, 1]) and VIDEO_KEY not in ds.episode(0)
    assert len(ds) == N_FRAMES
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            open_(copy)
    said = [str(w.message) for w in seen if issubclass(w.category, LeRobotZarrWarning)]
    assert len(said) == 1 and f"{VIDEO_KEY!r} is left out of samples" in said[0], said


# ---------------------------------------------------------------------------------------------------------------
# indices
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("i", [N_FRAMES, N_FRAMES + 7, 10**12])
def test_getitem_out_of_range_positive(sample, i):
    _, _, ds = sample
    msg = raises(FrameIndexError, IndexError, ds.__getitem__, i)
    assert str(i) in msg and str(N_FRAMES) in msg


@pytest.mark.parametrize("i", [-N_FRAMES - 1, -N_FRAMES - 30])
def test_getitem_out_of_range_negative_names_given_index(sample, i):
    _, _, ds = sample
    msg = raises(FrameIndexError, IndexError, ds.__getitem__, i)
    assert str(i) in msg and str(N_FRAMES) in msg, msg


def test_getitem_negative_in_range_works(sample):
    _, _, ds = sample
    assert int(ds[-1]["index"]) == N_FRAMES - 1
    assert int(ds[-N_FRAMES]["index"]) == 0


@pytest.mark.parametrize("indices,bad", [
    ([0, N_FRAMES], N_FRAMES),
    ([N_FRAMES + 5], N_FRAMES + 5),
    ([1, -N_FRAMES - 1], -N_FRAMES - 1),
])
def test_get_batch_out_of_range(sample, indices, bad):
    _, _, ds = sample
    msg = raises(FrameIndexError, IndexError, ds.get_batch, indices)
    assert str(bad) in msg and str(N_FRAMES) in msg


@pytest.mark.parametrize("i", [1.5, "3", None, 2.0, np.float64(1.0)])
def test_getitem_non_integer(sample, i):
    _, _, ds = sample
    with pytest.raises(TypeError):
        ds[i]


@pytest.mark.parametrize("indices", [[0.5], np.array([1.0, 2.0]), ["a"], [True, False]])
def test_get_batch_non_integer(sample, indices):
    _, _, ds = sample
    with pytest.raises(TypeError):
        ds.get_batch(indices)


def test_integer_like_indices_accepted(sample):
    _, _, ds = sample
    assert int(ds[np.int64(3)]["index"]) == 3
    assert ds.get_batch(np.array([1, 2], dtype=np.uint8))["index"].tolist() == [1, 2]


@pytest.mark.parametrize("e", [len(LENGTHS), len(LENGTHS) + 10, -1])
def test_episode_out_of_range(sample, e):
    _, _, ds = sample
    msg = raises(FrameIndexError, IndexError, ds.episode, e)
    assert f"episode {e}" in msg


def test_episode_non_integer(sample):
    _, _, ds = sample
    with pytest.raises(TypeError):
        ds.episode(1.0)


def test_episode_frames_unknown_episode(sample):
    _, _, ds = sample
    msg = raises(FrameIndexError, IndexError, ds.episode_frames, 99)
    assert "episode 99" in msg


@pytest.mark.parametrize("episodes", [[len(LENGTHS)], [0, 99], [-1]])
def test_open_with_episodes_out_of_range(tmp_path, episodes):
    src = make_source(tmp_path / "src")
    bad = [e for e in episodes if not 0 <= e < len(LENGTHS)][0]
    msg = raises(FrameIndexError, IndexError, open_, src, tmp_path / "store", episodes=episodes)
    assert f"episode {bad}" in msg or str(bad) in msg
    # nothing may have been written for a non-existent episode
    assert not list(tmp_path.glob("store/*/c/-1")) and not list(tmp_path.glob(f"store/*/c/{bad}"))


def test_open_store_with_episodes_out_of_range(sample):
    _, store, _ = sample
    msg = raises(FrameIndexError, IndexError, open_, store, episodes=[0, 17])
    assert "episode 17" in msg


# ---------------------------------------------------------------------------------------------------------------
# stores
# ---------------------------------------------------------------------------------------------------------------
def test_store_missing_episodes_without_source(tmp_path):
    src = make_source(tmp_path / "src")
    store = tmp_path / "store"
    open_(src, store, episodes=[0, 1])
    shutil.rmtree(src)
    msg = raises(NotMaterializedError, LookupError, open_, store, episodes=[1, 2, 3])
    assert "[2, 3]" in msg and str(store) in msg
    ds = open_(store, episodes=[0, 1])  # what is there still opens
    assert len(ds) == LENGTHS[0] + LENGTHS[1]


def test_store_missing_episodes_with_source_present_transcodes(tmp_path):
    src = make_source(tmp_path / "src")
    store = tmp_path / "store"
    open_(src, store, episodes=[0])
    ds = open_(store, episodes=[2])
    assert len(ds) == LENGTHS[2]


def test_root_non_empty_folder_refused_files_untouched(tmp_path):
    src = make_source(tmp_path / "src")
    folder = tmp_path / "my_documents"
    (folder / "sub").mkdir(parents=True)
    (folder / "thesis.txt").write_text("precious")
    (folder / "sub" / "data.bin").write_bytes(os.urandom(100))
    before = snapshot(folder)
    msg = raises(StoreError, ValueError, open_, src, folder)
    assert str(folder) in msg
    after = snapshot(folder)
    assert {k: v for k, v in after.items() if k in before} == before  # existing files untouched
    assert not any(k.startswith(".lerobot_zarr") or k == "zarr.json" for k in after)


def test_root_non_empty_folder_refused_leaves_no_debris(tmp_path):
    """Refusing a foreign folder must not leave a ``.lock`` (or anything else) behind in it."""
    src = make_source(tmp_path / "src")
    folder = tmp_path / "my_documents"
    folder.mkdir()
    (folder / "thesis.txt").write_text("precious")
    before = snapshot(folder)
    raises(StoreError, ValueError, open_, src, folder)
    assert sorted(snapshot(folder)) == sorted(before)


def test_root_is_a_regular_file(tmp_path):
    src = make_source(tmp_path / "src")
    target = tmp_path / "afile"
    target.write_text("keep me")
    msg = raises(StoreError, ValueError, open_, src, target)
    assert str(target) in msg
    assert target.read_text() == "keep me"


def test_source_rewritten_at_same_path_is_refused(tmp_path):
    src = make_source(tmp_path / "src")
    store = tmp_path / "store"
    first = open_(src, store).get_batch(np.arange(N_FRAMES))["observation.state"].copy()
    shutil.rmtree(src)
    make_source(src, seed=1)
    before = snapshot(store)
    msg = raises(StoreError, ValueError, open_, src, store)
    assert str(store) in msg and "made from" in msg
    assert snapshot(store) == before
    np.testing.assert_array_equal(open_(store).get_batch(np.arange(N_FRAMES))["observation.state"], first)


def test_store_opened_directly_does_not_mix_in_a_changed_source(tmp_path):
    """Opening the store path with missing episodes must not fill them from a source that has changed since."""
    src = make_source(tmp_path / "src")
    store = tmp_path / "store"
    open_(src, store, episodes=[0, 1])
    shutil.rmtree(src)
    make_source(src, seed=1)  # same lengths, different frames
    msg = raises(StoreError, ValueError, open_, store, episodes=[2])
    assert str(store) in msg and "made from" in msg
    assert not LeRobotZarrDataset(store).meta.materialized_episodes[2]


def _store_of_format_version(tmp_path: Path, version: int) -> tuple[Path, Path]:
    """A source and its store, whose root zarr.json then claims another format version."""
    src = make_source(tmp_path / "src")
    store = tmp_path / "store"
    open_(src, store)
    doc = json.loads((store / "zarr.json").read_text())
    doc["attributes"]["lerobot_zarr"]["format_version"] = version
    (store / "zarr.json").write_text(json.dumps(doc))
    return src, store


def test_store_format_version_unknown(tmp_path):
    src, store = _store_of_format_version(tmp_path, 99)
    msg = raises(UnsupportedStoreError, ValueError, LeRobotZarrDataset, store)
    assert "99" in msg and str(store / "zarr.json") in msg


def test_store_format_version_unknown_via_open_dataset(tmp_path):
    src, store = _store_of_format_version(tmp_path, 99)
    msg = raises(UnsupportedStoreError, ValueError, open_, store)
    assert "99" in msg and str(store) in msg


def test_store_format_version_unknown_as_root(tmp_path):
    src, store = _store_of_format_version(tmp_path, 99)
    before = snapshot(store)
    msg = raises(UnsupportedStoreError, ValueError, open_, src, store)
    assert "99" in msg and str(store) in msg
    assert {k: v for k, v in snapshot(store).items() if k != ".lock"} == \
        {k: v for k, v in before.items() if k != ".lock"}


@pytest.mark.parametrize("damage", ["truncate", "grow", "delete"])
def test_damaged_chunk_file(tmp_path, damage):
    src = make_source(tmp_path / "src")
    store = tmp_path / "store"
    open_(src, store, pack_bytes=1)  # one episode per pack: pack 2 is episode 2
    bad = Path(chunk_path(store, "action", 2, 2))
    if damage == "truncate":
        with open(bad, "r+b") as f:
            f.truncate(10)
    elif damage == "grow":
        with open(bad, "ab") as f:
            f.write(b"\0" * 8)
    else:
        bad.unlink()
    ds = open_(store)
    first = sum(LENGTHS[:2])
    for call in (lambda: ds[first + 3], lambda: ds.get_batch([0, first])):
        msg = raises(StoreError, ValueError, call)
        assert str(bad) in msg and "episode 2" in msg
    # the other episodes still read after the failure
    assert int(ds[0]["index"]) == 0 and int(ds[N_FRAMES - 1]["index"]) == N_FRAMES - 1


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_damaged_chunk_file_episode_access(tmp_path, damage):
    src = make_source(tmp_path / "src")
    store = tmp_path / "store"
    open_(src, store, pack_bytes=1)
    bad = Path(chunk_path(store, "action", 2, 2))
    if damage == "truncate":
        with open(bad, "r+b") as f:
            f.truncate(10)
    else:
        bad.unlink()
    ds = open_(store)
    msg = raises(StoreError, ValueError, ds.episode, 2)
    assert str(bad) in msg and "episode 2" in msg


# ---------------------------------------------------------------------------------------------------------------
# writer lock
# ---------------------------------------------------------------------------------------------------------------
TRY_LOCK = textwrap.dedent("""
    import sys
    from pathlib import Path
    from lerobot_zarr.store import WriterLock
    from lerobot_zarr.errors import StoreLockedError
    try:
        with WriterLock(Path(sys.argv[1]), blocking=False):
            print("ACQUIRED")
    except StoreLockedError as exc:
        print("LOCKED", isinstance(exc, BlockingIOError), exc)
""")

HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from lerobot_zarr.store import WriterLock
    with WriterLock(Path(sys.argv[1])):
        print("HELD", flush=True)
        time.sleep(120)
""")


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))


def _try_lock(store: Path) -> str:
    out = subprocess.run([sys.executable, "-c", TRY_LOCK, str(store)], capture_output=True, text=True, timeout=300,
                         env=_env())
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_second_writer_is_refused_then_succeeds_after_release(tmp_path):
    store = tmp_path / "store"
    with WriterLock(store):
        got = _try_lock(store)
        assert got.startswith("LOCKED True"), got
        assert str(store) in got
    assert _try_lock(store) == "ACQUIRED"


def test_second_writer_in_process(tmp_path):
    store = tmp_path / "store"
    with WriterLock(store):
        msg = raises(StoreLockedError, BlockingIOError, WriterLock(store, blocking=False).__enter__)
        assert str(store) in msg
    with WriterLock(store, blocking=False):
        pass


def test_lock_of_killed_process_does_not_block(tmp_path):
    src = make_source(tmp_path / "src")
    store = tmp_path / "store"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(store)], stdout=subprocess.PIPE, text=True,
                              env=_env())
    try:
        assert holder.stdout.readline().strip() == "HELD"
        assert _try_lock(store).startswith("LOCKED")
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
        holder.stdout.close()
    with WriterLock(store, blocking=False):
        pass
    assert len(open_(src, store)) == N_FRAMES  # (.lock is the only entry; the store is created normally)


# ---------------------------------------------------------------------------------------------------------------
# real datasets (copied to tmp_path before damage)
# ---------------------------------------------------------------------------------------------------------------
def test_real_truncated_data_parquet(tmp_path):
    src = real_dataset("record-test", tmp_path)
    bad = src / V3_FILE0
    raw = bad.read_bytes()
    bad.write_bytes(raw[: len(raw) * 2 // 3])
    msg = raises(CorruptSourceError, ValueError, open_, src, tmp_path / "store")
    assert str(bad) in msg


def test_real_missing_data_file(tmp_path):
    src = real_dataset("open_50", tmp_path)
    bad = src / "data/chunk-000/file-003.parquet"  # holds episode 3
    bad.unlink()
    msg = raises(SourceNotFoundError, FileNotFoundError, open_, src, tmp_path / "store")
    assert str(bad) in msg and "3" in msg.replace(str(bad), "")


def test_real_v21_missing_first_data_file(tmp_path):
    src = real_dataset("G1-policy-train", tmp_path)
    bad = src / "data/chunk-000/episode_000000.parquet"
    bad.unlink()
    msg = raises(SourceNotFoundError, FileNotFoundError, open_, src, tmp_path / "store")
    assert str(bad) in msg and "episode" in msg.replace(str(bad), ""), msg


def test_real_video_key_in_delta_timestamps(tmp_path):
    src = REAL_DATASETS / "record-test"
    if not (src / "meta" / "info.json").is_file():
        pytest.skip(f"real dataset 'record-test' not found at {src}; skipping (needs ../shared/datasets)")
    store = tmp_path / "store"  # the source is only read
    with pytest.warns(UserWarning, match="left out of samples"):
        ds = open_(src, store)
    video = "observation.images.front"
    assert video in ds.left_out and video not in ds[0]
    assert sorted(ds.meta.unavailable[video]) == [0, 1, 2, 3]  # record-test ships without its videos
    assert all("not found" in r for r in ds.meta.unavailable[video].values())
    msg = raises(NotMaterializedError, LookupError, open_, store, delta_timestamps={video: [0.0]})
    assert repr(video) in msg and "not in the samples" in msg and "not found" in msg, msg
    assert "no episode has it" in msg and "delta_timestamps" in msg, msg


def test_store_errors_say_what_happened_and_stay_store_errors():
    """Every subclass of StoreError is still caught as StoreError (and ValueError), and as the builtin it refines;
    errors keep their fields through pickling (DataLoader workers send them to the main process)."""
    import pickle

    import lerobot_zarr.errors as errors

    refines = {"StoreNotFoundError": (SourceNotFoundError, FileNotFoundError), "MapLimitError": (MemoryError,),
               "StoreExistsError": (FileExistsError,)}
    subclasses = [getattr(errors, name) for name in errors.__all__
                  if isinstance(getattr(errors, name), type) and issubclass(getattr(errors, name), StoreError)
                  and getattr(errors, name) is not StoreError]
    assert {c.__name__ for c in subclasses} >= {"CorruptStoreError", "EmptyStoreError", "ReadOnlyStoreError",
                                                "SourceMismatchError", "UnsupportedStoreError", *refines}
    for cls in subclasses:
        assert issubclass(cls, ValueError) and all(issubclass(cls, b) for b in refines.get(cls.__name__, ()))
        got = pickle.loads(pickle.dumps(cls("what happened", path="/x", feature="cam")))
        assert type(got) is cls and str(got) == "what happened" and (got.path, got.feature) == ("/x", "cam")
