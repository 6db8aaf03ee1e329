"""Source reading hardening (issue 13, items 2, 9 and 11): metadata a LeRobot folder may hold, damaged, gives a typed
error naming the file (and the episode, feature or field), never a raw Python error; and frames whose timestamps
are out of step with fps are refused when they are read (transcode time), the way LeRobot checks them.

Sources are synthetic (``write_sample_dataset``), damaged in a temporary folder with json / pyarrow / PIL.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from lerobot_zarr import CorruptSourceError, LeRobotZarrError, SchemaMismatchError, open_dataset
from lerobot_zarr.lerobot.index_file import INDEX_FILE, read_index
from lerobot_zarr.lerobot.source import LeRobotSource
from lerobot_zarr.lerobot.source_files import LocalFiles
from lerobot_zarr.testing.sample_data import write_sample_dataset

LENGTHS = [10, 12, 14, 16]
FPS = 30
V3_DATA = "data/chunk-000/file-000.parquet"
V3_EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def make(tmp_path: Path, **kwargs) -> Path:
    kwargs.setdefault("n_episodes", len(LENGTHS))
    kwargs.setdefault("lengths", LENGTHS)
    return write_sample_dataset(tmp_path / "src", fps=FPS, **kwargs)


def open_(src: Path, tmp_path: Path):
    return open_dataset(src, root=tmp_path / "store", progress=False)


def fails(exc_type, src: Path, tmp_path: Path, *needles: str) -> str:
    """Opening ``src`` raises ``exc_type`` (one of ours) whose message holds every needle; returns the message."""
    with pytest.raises(exc_type) as info:
        open_(src, tmp_path)
    assert isinstance(info.value, LeRobotZarrError)
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


def edit_info(src: Path, **changes) -> None:
    path = src / "meta" / "info.json"
    info = json.loads(path.read_text())
    info.update(changes)
    path.write_text(json.dumps(info))


def edit_table(path: Path, edit) -> None:
    pq.write_table(edit(pq.read_table(path)), path)


def set_column(table: pa.Table, name: str, array: pa.Array) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, pa.field(name, array.type), array)


# ------------------------------------------------------------------------------------------------ info.json


@pytest.mark.parametrize("fps", [float("nan"), float("inf"), -30, 0, "30", True, None, [30]])
def test_fps_must_be_a_finite_positive_number(tmp_path, fps):
    src = make(tmp_path)
    edit_info(src, fps=fps)
    fails(CorruptSourceError, src, tmp_path, str(src / "meta" / "info.json"), "fps")


@pytest.mark.parametrize("template", [
    "data/{chunk_index.__class__}/file-{file_index:03d}.parquet",  # attribute access
    "data/{chunk_index[0]}/file-{file_index:03d}.parquet",  # indexing
    "data/chunk-{chunk_index:0999999999d}/file-{file_index:03d}.parquet",  # a huge width
    "data/chunk-{chunk_index!r}/file-{file_index:03d}.parquet",  # a conversion
    "data/chunk-{chunk_index:>8}/file-{file_index:03d}.parquet",  # not a plain integer spec
    "data/chunk-{chunk_index:{file_index}}/x.parquet",  # nested field
    "data/{episode_index:06d}.parquet",  # not a field of v3 data paths
])
def test_path_template_refused_before_formatting(tmp_path, template):
    src = make(tmp_path)
    edit_info(src, data_path=template)
    fails(CorruptSourceError, src, tmp_path, "info.json", "data_path")


def test_video_path_template_is_checked_too(tmp_path):
    src = make(tmp_path, video_keys=("observation.images.cam",))
    edit_info(src, video_path="videos/{video_key.__class__.__name__}/{chunk_index}/{file_index}.mp4")
    fails(CorruptSourceError, src, tmp_path, "info.json", "video_path")


def test_plain_templates_of_other_widths_are_read(tmp_path):
    src = make(tmp_path)
    reference = open_dataset(src, root=tmp_path / "reference", progress=False)
    moved = src / "data" / "chunk-00000" / "file-00000.parquet"
    moved.parent.mkdir(parents=True)
    (src / V3_DATA).rename(moved)
    edit_info(src, data_path="data/chunk-{chunk_index:05d}/file-{file_index:05d}.parquet")
    ds = open_(src, tmp_path)
    want, got = reference.get_batch(np.arange(len(reference))), ds.get_batch(np.arange(len(ds)))
    assert all(np.array_equal(got[k], want[k]) for k in want if k != "task")


@pytest.mark.parametrize("value", ["abc", 1.5, 0, -3, True])
def test_chunks_size_must_be_a_positive_integer(tmp_path, value):
    src = make(tmp_path, version="v2.1")
    edit_info(src, chunks_size=value)
    fails(CorruptSourceError, src, tmp_path, "info.json", "chunks_size")


# ------------------------------------------------------------------------------------------------ v2.1 jsonl


@pytest.mark.parametrize("line, needle", [
    ('{"episode_index": "1", "length": 12, "tasks": ["pick the cube"]}', "episode_index"),
    ('{"episode_index": 1.5, "length": 12}', "episode_index"),
    ('{"episode_index": true, "length": 12}', "episode_index"),
    ('{"episode_index": null, "length": 12}', "episode_index"),
    ('{"length": 12}', "episode_index"),
    ('[1, 12]', "JSON object"),
    ('"episode 1"', "JSON object"),
    ('{"episode_index": 1, "length": 0}', "length"),
    ('{"episode_index": 1, "length": "12"}', "length"),
    ('{"episode_index": 1, "length": 12, "tasks": "pick the cube"}', "tasks"),
    ('{"episode_index": 1, "length": 12, "tasks": [1]}', "tasks"),
    ('{"episode_index": 1, "length": ', "invalid JSON"),
])
def test_malformed_episodes_jsonl_line(tmp_path, line, needle):
    src = make(tmp_path, version="v2.1")
    path = src / "meta" / "episodes.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = line
    path.write_text("\n".join(lines) + "\n")
    fails(CorruptSourceError, src, tmp_path, f"{path}:2", needle)


@pytest.mark.parametrize("line", [
    '{"episode_index": 0, "stats": [1, 2]}',
    '{"episode_index": 0, "stats": {"action": [0, 1]}}',
    '{"episode_index": 0, "stats": {"action": {"min": [0.0]}}}',
    '{"episode_index": 0, "stats": {"action": {"min": ["x"], "count": [10]}}}',
    '{"episode_index": 0, "stats": {"action": {"min": [[0.0], [1.0, 2.0]], "count": [10]}}}',
    '{"episode_index": 0, "stats": {"action": {"count": "ten"}}}',
    '7',
])
def test_malformed_episodes_stats_entry(tmp_path, line):
    src = make(tmp_path, version="v2.1")
    path = src / "meta" / "episodes_stats.jsonl"
    lines = path.read_text().splitlines()
    lines[0] = line
    path.write_text("\n".join(lines) + "\n")
    fails(CorruptSourceError, src, tmp_path, str(path))


@pytest.mark.parametrize("line", ['{"task_index": "0", "task": "pick the cube"}', '{"task_index": 0}',
                                  '{"task_index": 0, "task": 5}', '{"task_index": 1, "task": "again"}'])
def test_malformed_tasks_jsonl(tmp_path, line):
    src = make(tmp_path, version="v2.1")
    path = src / "meta" / "tasks.jsonl"
    lines = path.read_text().splitlines()
    lines[0] = line
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises((CorruptSourceError, SchemaMismatchError)) as info:
        open_(src, tmp_path)
    assert str(path) in str(info.value)


# ------------------------------------------------------------------------------------------------ v3 parquet table


@pytest.mark.parametrize("column, array, needle", [
    ("data/chunk_index", pa.array([0, None, 0, 0], pa.int64()), "episode 1"),
    ("data/chunk_index", pa.array([0.0, 0.0, 0.0, 0.0]), "double"),
    ("data/file_index", pa.array([0, -1, 0, 0], pa.int64()), "episode 1"),
    ("episode_index", pa.array(["0", "1", "2", "3"]), "string"),
    ("episode_index", pa.array([0, 1, None, 3], pa.int64()), "episode_index"),
    ("length", pa.array([10, 12, None, 16], pa.int64()), "episode 2"),
    ("tasks", pa.array(["pick the cube"] * 4), "tasks"),
    ("tasks", pa.array([[1], [2], [3], [4]]), "tasks"),
])
def test_malformed_v3_episode_table(tmp_path, column, array, needle):
    src = make(tmp_path)
    edit_table(src / V3_EPISODES, lambda t: set_column(t, column, array))
    fails(CorruptSourceError, src, tmp_path, str(src / "meta" / "episodes"), column, needle)


def test_v3_episodes_must_follow_each_other(tmp_path):
    src = make(tmp_path)
    starts = np.concatenate([[0], np.cumsum(LENGTHS)[:-1]])
    starts[2] += 1

    def shift(t):
        t = set_column(t, "dataset_from_index", pa.array(starts, pa.int64()))
        return set_column(t, "dataset_to_index", pa.array(starts + LENGTHS, pa.int64()))

    edit_table(src / V3_EPISODES, shift)
    fails(SchemaMismatchError, src, tmp_path, "episode 2", "follow each other")


# ------------------------------------------------------------------------------------------------ timestamps


def _shift_timestamps(path: Path, rows: slice, by: float) -> None:
    def edit(t):
        ts = t.column("timestamp").to_numpy().copy()
        ts[rows] += np.float32(by)
        return set_column(t, "timestamp", pa.array(ts, pa.float32()))

    edit_table(path, edit)


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_dropped_frame_is_refused_naming_file_and_episode(tmp_path, version):
    src = make(tmp_path, version=version)
    if version == "v3.0":
        path, first = src / V3_DATA, sum(LENGTHS[:2])
    else:
        path, first = src / "data" / "chunk-000" / "episode_000002.parquet", 0
    _shift_timestamps(path, slice(first + 5, first + LENGTHS[2]), 1 / FPS)  # frame 5 of episode 2 shows t + 2/fps
    fails(SchemaMismatchError, src, tmp_path, str(path), "episode 2", "frames 4 and 5", "1/fps")


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_shuffled_frame_index_is_refused_naming_file_and_episode(tmp_path, version):
    """The other columns in order, frame_index shuffled within episode 2 (rows reordered by a tool that kept the
    rest): refused, as the other index columns are, rather than served as is."""
    src = make(tmp_path, version=version)
    if version == "v3.0":
        path, first = src / V3_DATA, sum(LENGTHS[:2])
    else:
        path, first = src / "data" / "chunk-000" / "episode_000002.parquet", 0

    def shuffle(t):
        frames = t.column("frame_index").to_numpy().copy()
        frames[first + 3], frames[first + 4] = frames[first + 4], frames[first + 3]
        return set_column(t, "frame_index", pa.array(frames, t.schema.field("frame_index").type))

    edit_table(path, shuffle)
    fails(SchemaMismatchError, src, tmp_path, str(path), "episode 2", "'frame_index'", "row 3 holds 4")


def test_timestamps_at_another_fps_are_refused(tmp_path):
    src = make(tmp_path)
    edit_info(src, fps=15)
    fails(SchemaMismatchError, src, tmp_path, "episode 0", "1/fps = 0.066667")


def test_tiny_jitter_within_tolerance_is_accepted(tmp_path):
    src = make(tmp_path)
    _shift_timestamps(src / V3_DATA, slice(3, 4), 5e-5)  # within LeRobot's 1e-4 s
    assert len(open_(src, tmp_path)) == sum(LENGTHS)


def test_long_float32_episode_is_accepted(tmp_path):
    """float32 timestamps of a 2 h episode at 30 fps step by more than 1e-4 s of rounding: still in step."""
    source = LeRobotSource(make(tmp_path))
    ts = (np.arange(2 * 3600 * FPS) / FPS).astype(np.float32)
    source._check_timestamps(ts, 0, "long")
    dropped = np.delete(ts, 100_000)
    with pytest.raises(SchemaMismatchError, match="frames 99999 and 100000"):
        source._check_timestamps(dropped, 0, "long")


# ------------------------------------------------------------------------------------------------ images


def _png_of_size(width: int, height: int) -> bytes:
    """A 1x1 RGB PNG whose header claims ``width`` x ``height`` (a decompression bomb's header)."""
    import io

    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, format="PNG")
    data = bytearray(buf.getvalue())
    ihdr = bytes(data[12:29])  # b"IHDR" + 13 bytes
    patched = b"IHDR" + struct.pack(">II", width, height) + ihdr[12:]
    data[12:29] = patched
    data[29:33] = struct.pack(">I", zlib.crc32(patched))
    return bytes(data)


def _replace_image(path: Path, key: str, row: int, payload: bytes) -> None:
    def edit(t):
        col = t.column(key).combine_chunks()
        data = col.field("bytes").to_pylist()
        data[row] = payload
        new = pa.StructArray.from_arrays([pa.array(data, pa.binary()), col.field("path")], names=["bytes", "path"])
        return set_column(t, key, new)

    edit_table(path, edit)


@pytest.mark.parametrize("size, error", [((50_000, 50_000), CorruptSourceError),  # PIL's DecompressionBombError
                                         ((10_000, 10_000), SchemaMismatchError)])  # header checked before decoding
@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_png_decompression_bomb_is_a_typed_error(tmp_path, size, error):
    key = "observation.images.top"
    src = make(tmp_path, image_keys=(key,), image_shape=(8, 10, 3))
    _replace_image(src / V3_DATA, key, LENGTHS[0] + 3, _png_of_size(*size))
    fails(error, src, tmp_path, str(src / V3_DATA), "episode 1", repr(key), f"file row {LENGTHS[0] + 3}")


# ------------------------------------------------------------------------------------------------ index file


class _Files(LocalFiles):
    """A folder whose files are listed with their sizes and can be checked against identities (as HubFiles does
    from the tree listing)."""

    def __init__(self, root: Path, ids: dict):
        super().__init__(root)
        self.ids = ids
        self.sizes = {p.relative_to(self.root).as_posix(): p.stat().st_size for p in self.root.rglob("*")
                      if p.is_file()}

    def location(self, rel: str = "") -> str:
        return f"repo:{rel}"

    def matches(self, rel: str, identity: dict) -> bool:
        return self.ids.get(rel) == identity


def test_index_of_another_version_or_for_other_files_is_ignored(tmp_path):
    root = tmp_path / "repo"
    (root / "meta").mkdir(parents=True)
    (root / INDEX_FILE).write_text(json.dumps({"format_version": 1, "files": {}}))
    assert read_index(_Files(root, {})) is None
    ident = {"sha256": "0" * 64, "git_sha1": "0" * 40}
    (root / INDEX_FILE).write_text(json.dumps({"format_version": 2, "files": {"meta/info.json": ident}}))
    assert read_index(_Files(root, {})) is None  # the repo does not hold that file: stale


@pytest.mark.parametrize("damage", [
    lambda d: d.update(data_files=["../../escape.parquet"]),
    lambda d: d["episodes"].update(length=[10, -1]),
    lambda d: d["episodes"].update(data_file=[0, 7]),
    lambda d: d.update(footers={"data/chunk-000/file-000.parquet": "not base64!"}),
    lambda d: d.pop("tasks"),
])
def test_damaged_index_for_matching_files_is_a_corrupt_source(tmp_path, damage):
    root = tmp_path / "repo"
    (root / "meta").mkdir(parents=True)
    ident = {"sha256": "0" * 64, "git_sha1": "0" * 40}
    doc = {"format_version": 2, "files": {"data/chunk-000/file-000.parquet": ident}, "info": {}, "stats": {},
           "tasks": ["t"], "data_files": ["data/chunk-000/file-000.parquet"], "video_files": [],
           "episodes": {"length": [10, 12], "data_file": [0, 0], "file_row": [0, 10], "tasks": [[0], [0]],
                        "videos": {}},
           "footer_bytes": {"data/chunk-000/file-000.parquet": 100}, "footers": {}}
    damage(doc)
    (root / INDEX_FILE).write_text(json.dumps(doc))
    with pytest.raises(CorruptSourceError, match=r"repo:meta/lerobot_zarr_index\.json|leaves the dataset folder"):
        read_index(_Files(root, {"data/chunk-000/file-000.parquet": ident}))


def _png(pixels: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def test_images_of_another_height_and_width_are_served_as_recorded(tmp_path):
    """Frames of H x W where info.json declares W x H (as LeRobot's own test fixtures write them): LeRobot serves them
    as recorded, and so does the store, with a warning naming the feature; a later frame of yet another size (as
    many pixels) is still refused, naming its row."""
    key = "observation.images.top"
    src = make(tmp_path, image_keys=(key,), image_shape=(8, 10, 3))
    rng = np.random.default_rng(3)
    frames = rng.integers(0, 256, (sum(LENGTHS), 10, 8, 3), dtype=np.uint8)

    def edit(t):
        col = t.column(key).combine_chunks()
        data = pa.array([_png(f) for f in frames], pa.binary())
        return set_column(t, key, pa.StructArray.from_arrays([data, col.field("path")], names=["bytes", "path"]))

    edit_table(src / V3_DATA, edit)
    with pytest.warns(UserWarning, match=rf"{key!r} has frames of 10x8 pixels where info.json declares \(8, 10, 3\)"):
        ds = open_(src, tmp_path)
    assert ds.array_specs[key].frame_shape == (10, 8, 3)
    for i in (0, LENGTHS[0] + 1, len(ds) - 1):
        np.testing.assert_array_equal(np.asarray(ds[i][key]), frames[i])
    out = ds.to_lerobot(tmp_path / "exported", progress=False)  # written back as recorded, info.json saying so
    ds.close()
    assert json.loads((out / "meta" / "info.json").read_text())["features"][key]["shape"] == [10, 8, 3]
    back = open_dataset(out, root=tmp_path / "back", progress=False)
    np.testing.assert_array_equal(np.asarray(back[len(back) - 1][key]), frames[-1])
    back.close()
    _replace_image(src / V3_DATA, key, LENGTHS[0] + 3, _png(frames[0].reshape(5, 16, 3)))
    fails(SchemaMismatchError, src, tmp_path / "again", "episode 1", repr(key), f"file row {LENGTHS[0] + 3}",
          "5x16")
