"""Tests of lerobot_zarr.testing.sample_data: the synthetic datasets must look like real LeRobot output."""

from __future__ import annotations

import io
import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from lerobot_zarr.testing.sample_data import write_sample_dataset

WRIST = "observation.images.wrist"
TOP = "observation.images.top"


def _json(path: pathlib.Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _jsonl(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _files(root: pathlib.Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}


def _data(root: pathlib.Path) -> pa.Table:
    """All frames of the dataset, files read in path order (= global index order)."""
    return pa.concat_tables(pq.read_table(file) for file in sorted((root / "data").rglob("*.parquet")))


def _matrix(table: pa.Table, key: str) -> np.ndarray:
    """A (nested) list column as a float array of shape (rows, ...)."""
    values = table.column(key).combine_chunks()
    while pa.types.is_list(values.type) or pa.types.is_fixed_size_list(values.type):
        values = values.flatten()
    return np.asarray(values).reshape(table.num_rows, -1)


def _check_frames(info: dict, data: pa.Table) -> None:
    """Counts, index, frame_index and timestamps agree with info.json."""
    assert data.num_rows == info["total_frames"]
    index = np.asarray(data.column("index"))
    np.testing.assert_array_equal(index, np.arange(info["total_frames"]))
    episode_index = np.asarray(data.column("episode_index"))
    assert np.all(np.diff(episode_index) >= 0)
    assert len(np.unique(episode_index)) == info["total_episodes"]
    frame_index = np.asarray(data.column("frame_index"))
    starts = np.flatnonzero(np.diff(episode_index, prepend=-1))
    np.testing.assert_array_equal(frame_index, index - np.repeat(starts, np.diff(np.append(starts, len(index)))))
    timestamp = np.asarray(data.column("timestamp"))
    assert timestamp.dtype == np.float32
    np.testing.assert_array_equal(timestamp, (frame_index / info["fps"]).astype(np.float32))


def test_v3_layout_counts_and_episodes(tmp_path: pathlib.Path) -> None:
    root = write_sample_dataset(
        tmp_path / "ds", n_episodes=5, episodes_per_file=2, image_keys=(WRIST,), extra_nd=True, video_keys=(TOP,)
    )
    assert _files(root) == {
        "meta/info.json",
        "meta/stats.json",
        "meta/tasks.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "data/chunk-000/file-000.parquet",
        "data/chunk-000/file-001.parquet",
        "data/chunk-000/file-002.parquet",
    }
    info = _json(root / "meta/info.json")
    assert info["codebase_version"] == "v3.0"
    assert info["total_episodes"] == 5 and info["total_tasks"] == 2 and info["chunks_size"] == 1000
    assert info["splits"] == {"train": "0:5"}
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    features = info["features"]
    for key, dtype in [("timestamp", "float32"), ("frame_index", "int64"), ("index", "int64")]:
        assert features[key] == {"dtype": dtype, "shape": [1], "names": None}
    assert features["observation.state"]["names"] == [f"joint_{i}" for i in range(6)]
    assert features[WRIST] == {"dtype": "image", "shape": [24, 32, 3], "names": ["height", "width", "channels"]}
    assert features[TOP]["dtype"] == "video" and features[TOP]["info"]["video.fps"] == 30
    assert features["observation.grid"]["shape"] == [3, 4]

    data = _data(root)
    _check_frames(info, data)
    assert data.column_names == [
        "observation.state", "action", "observation.grid", WRIST,
        "timestamp", "frame_index", "episode_index", "index", "task_index",
    ]
    assert data.schema.field("observation.state").type == pa.list_(pa.float32(), 6)
    assert data.schema.field("observation.grid").type == pa.list_(pa.list_(pa.float32(), 4), 3)
    assert b"huggingface" in data.schema.metadata

    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert episodes["episode_index"] == list(range(5))
    assert episodes["tasks"] == [["pick the cube"], ["place the cube"]] * 2 + [["pick the cube"]]
    assert episodes["data/file_index"] == [0, 0, 1, 1, 2]
    episode_index = np.asarray(data.column("episode_index"))
    task_index = np.asarray(data.column("task_index"))
    for e, (start, stop, length) in enumerate(
        zip(episodes["dataset_from_index"], episodes["dataset_to_index"], episodes["length"])
    ):
        assert stop - start == length
        assert np.all(episode_index[start:stop] == e) and np.all(task_index[start:stop] == e % 2)
        assert episodes[f"videos/{TOP}/to_timestamp"][e] == pytest.approx(
            episodes[f"videos/{TOP}/from_timestamp"][e] + length / 30
        )
        assert episodes["stats/index/min"][e] == [start]
        assert episodes["stats/observation.state/count"][e] == [length]
    assert episodes["dataset_to_index"][-1] == info["total_frames"]
    assert episodes[f"videos/{TOP}/from_timestamp"][2] == 0.0  # a new file restarts at 0


def test_v3_row_groups(tmp_path: pathlib.Path) -> None:
    per_episode = write_sample_dataset(tmp_path / "a", n_episodes=4, lengths=[5, 9, 1, 7])
    metadata = pq.ParquetFile(per_episode / "data/chunk-000/file-000.parquet").metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [5, 9, 1, 7]

    per_file = write_sample_dataset(tmp_path / "b", n_episodes=4, lengths=[5, 9, 1, 7], row_group_per_episode=False)
    assert pq.ParquetFile(per_file / "data/chunk-000/file-000.parquet").metadata.num_row_groups == 1


@pytest.mark.parametrize(("image_format", "shape"), [("png", (24, 32, 3)), ("jpeg", (16, 20, 3)), ("png", (8, 8, 1))])
def test_images_decode_to_declared_shape(tmp_path: pathlib.Path, image_format: str, shape: tuple) -> None:
    root = write_sample_dataset(
        tmp_path / "ds", n_episodes=2, lengths=[3, 4], image_keys=(WRIST,), image_shape=shape,
        image_format=image_format,
    )
    declared = _json(root / "meta/info.json")["features"][WRIST]["shape"]
    assert declared == list(shape)
    column = _data(root).column(WRIST)
    assert column.type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    frames = [np.asarray(Image.open(io.BytesIO(cell["bytes"]))) for cell in column.to_pylist()]
    assert len(frames) == 7
    for frame in frames:
        assert frame.dtype == np.uint8
        assert frame.reshape(*frame.shape[:2], -1).shape == tuple(declared)
    assert frames[0].std() > 0 and not np.array_equal(frames[0], frames[1])


def test_stats_match_the_data(tmp_path: pathlib.Path) -> None:
    root = write_sample_dataset(tmp_path / "ds", n_episodes=7, extra_nd=True, image_keys=(WRIST,))
    stats = _json(root / "meta/stats.json")
    data = _data(root)
    assert set(stats) == set(_json(root / "meta/info.json")["features"])
    for key in ("observation.state", "action", "observation.grid", "timestamp", "index", "task_index"):
        values = _matrix(data, key).astype(np.float64)
        if key == "observation.grid":  # (3, 4) per frame: LeRobot 0.6.1's stats are over every axis but the last
            values = values.reshape(-1, 4)
        np.testing.assert_allclose(np.ravel(stats[key]["mean"]), values.mean(axis=0), atol=1e-5)
        np.testing.assert_allclose(np.ravel(stats[key]["std"]), values.std(axis=0), atol=1e-5)
        np.testing.assert_allclose(np.ravel(stats[key]["min"]), values.min(axis=0))
        np.testing.assert_allclose(np.ravel(stats[key]["max"]), values.max(axis=0))
        assert stats[key]["count"] == [data.num_rows]
        assert set(stats[key]) == {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
    assert np.shape(stats["observation.grid"]["mean"]) == (4,)
    def leaves(value):
        return [x for v in value for x in leaves(v)] if isinstance(value, list) else [value]

    for key in stats:  # LeRobot 0.6.1's: every statistic but count a float, integer features' too
        assert all(type(v) is float for name, vs in stats[key].items() if name != "count" for v in leaves(vs)), key
    assert np.shape(stats[WRIST]["mean"]) == (3, 1, 1)
    assert 0.0 <= np.min(stats[WRIST]["min"]) and np.max(stats[WRIST]["max"]) <= 1.0
    # the data holds an exact zero row
    assert np.any(np.all(_matrix(data, "observation.state") == 0.0, axis=1))


def test_tasks_parquet_has_pandas_task_index(tmp_path: pathlib.Path) -> None:
    root = write_sample_dataset(tmp_path / "ds", tasks=("pick/place", "b", "c"), n_episodes=2)
    table = pq.read_table(root / "meta/tasks.parquet")
    pandas_metadata = json.loads(table.schema.metadata[b"pandas"])
    assert pandas_metadata["index_columns"] == ["task"]
    assert [column["name"] for column in pandas_metadata["columns"]] == ["task_index", "task"]
    assert table.schema.field("task_index").type == pa.int64()
    assert table.to_pydict() == {"task_index": [0, 1], "task": ["pick/place", "b"]}  # only tasks in use


def test_v21_layout(tmp_path: pathlib.Path) -> None:
    root = write_sample_dataset(tmp_path / "ds", version="v2.1", n_episodes=3, lengths=[4, 6, 5], video_keys=(TOP,))
    assert _files(root) == {
        "meta/info.json",
        "meta/episodes.jsonl",
        "meta/tasks.jsonl",
        "meta/episodes_stats.jsonl",
        *(f"data/chunk-000/episode_{e:06d}.parquet" for e in range(3)),
    }
    info = _json(root / "meta/info.json")
    assert info["codebase_version"] == "v2.1"
    assert (info["total_episodes"], info["total_frames"], info["total_chunks"], info["total_videos"]) == (3, 15, 1, 3)
    assert info["data_path"] == "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    assert info["video_path"] == "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
    _check_frames(info, _data(root))
    assert _jsonl(root / "meta/episodes.jsonl") == [
        {"episode_index": 0, "tasks": ["pick the cube"], "length": 4},
        {"episode_index": 1, "tasks": ["place the cube"], "length": 6},
        {"episode_index": 2, "tasks": ["pick the cube"], "length": 5},
    ]
    assert _jsonl(root / "meta/tasks.jsonl") == [
        {"task_index": 0, "task": "pick the cube"},
        {"task_index": 1, "task": "place the cube"},
    ]
    for row in _jsonl(root / "meta/episodes_stats.jsonl"):
        file = root / f"data/chunk-000/episode_{row['episode_index']:06d}.parquet"
        episode = pq.read_table(file)
        assert pq.ParquetFile(file).metadata.num_row_groups == 1
        assert set(row["stats"]["action"]) == {"min", "max", "mean", "std", "count"}
        np.testing.assert_allclose(row["stats"]["action"]["mean"], _matrix(episode, "action").mean(axis=0), atol=1e-6)


def test_list_vectors_have_no_huggingface_metadata(tmp_path: pathlib.Path) -> None:
    root = write_sample_dataset(tmp_path / "ds", vector_type="list", extra_nd=True, write_stats=False)
    schema = pq.read_schema(root / "data/chunk-000/file-000.parquet")
    assert schema.field("action").type == pa.list_(pa.float32())
    assert schema.field("observation.grid").type == pa.list_(pa.list_(pa.float32()))
    assert b"huggingface" not in schema.metadata
    assert not (root / "meta/stats.json").exists()
    episodes = pq.read_schema(root / "meta/episodes/chunk-000/file-000.parquet")
    assert not any(name.startswith("stats/") for name in episodes.names)


def test_deterministic_and_seeded(tmp_path: pathlib.Path) -> None:
    options = dict(n_episodes=3, image_keys=(WRIST,), episodes_per_file=2)
    first = write_sample_dataset(tmp_path / "a", **options)
    second = write_sample_dataset(tmp_path / "b", **options)
    other = write_sample_dataset(tmp_path / "c", seed=1, **options)
    assert _files(first) == _files(second)
    for name in _files(first):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert (first / "data/chunk-000/file-000.parquet").read_bytes() != (
        other / "data/chunk-000/file-000.parquet"
    ).read_bytes()


def test_lengths_explicit_and_range(tmp_path: pathlib.Path) -> None:
    explicit = write_sample_dataset(tmp_path / "a", n_episodes=3, lengths=[2, 1, 3])
    assert pq.read_table(explicit / "meta/episodes/chunk-000/file-000.parquet")["length"].to_pylist() == [2, 1, 3]
    drawn = write_sample_dataset(tmp_path / "b", n_episodes=20, lengths=(3, 5))
    lengths = pq.read_table(drawn / "meta/episodes/chunk-000/file-000.parquet")["length"].to_pylist()
    assert min(lengths) >= 3 and max(lengths) <= 5 and len(set(lengths)) > 1


@pytest.mark.parametrize(
    "options",
    [
        {"version": "v2.0"},
        {"n_episodes": 0},
        {"lengths": [3, 4]},
        {"lengths": (5, 2)},
        {"lengths": [3, 0, 4, 5, 6, 7]},
        {"fps": 0},
        {"seed": -1},
        {"vector_type": "array"},
        {"image_format": "gif"},
        {"image_keys": ("action",)},
        {"image_keys": ("cam",), "video_keys": ("cam",)},
        {"video_keys": ("cam/left",)},
        {"image_shape": (4, 4, 2)},
        {"tasks": ()},
        {"tasks": "pick"},
        {"version": "v2.1", "episodes_per_file": 2},
        {"episodes_per_file": 0},
    ],
)
def test_invalid_arguments_raise_value_error(tmp_path: pathlib.Path, options: dict) -> None:
    with pytest.raises(ValueError):
        write_sample_dataset(tmp_path / "ds", **options)


def test_refuses_non_empty_folder(tmp_path: pathlib.Path) -> None:
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="empty"):
        write_sample_dataset(tmp_path)


def test_million_frames(tmp_path: pathlib.Path) -> None:
    # The benchmark size: about 1,000,000 frames; takes about 2-3 s here (the slowest test of this file).
    root = write_sample_dataset(tmp_path / "big", n_episodes=2000, lengths=(300, 700))
    info = _json(root / "meta/info.json")
    metadata = pq.ParquetFile(root / "data/chunk-000/file-000.parquet").metadata
    assert metadata.num_rows == info["total_frames"] and 600_000 <= info["total_frames"] <= 1_400_000
    assert metadata.num_row_groups == 2000
    lengths = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet", columns=["length"])["length"]
    assert int(np.asarray(lengths).sum()) == info["total_frames"]
