"""The ``LeRobotDataset`` drop-in against LeRobot 0.6.1's own class, on datasets LeRobot records in the test
(:mod:`lerobot_recorded`): its arguments, items and batches (types, dtypes, shapes, values exactly), slices,
transforms and ``meta``, and LeRobot's own tools run on it. Skipped without torch or lerobot."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (optional extra lerobot_zarr[torch])")
pytest.importorskip("lerobot", reason="lerobot is not installed (the drop-in is compared with LeRobot 0.6.1's class)")

from lerobot_recorded import FPS, KINDS, REPO_ID  # noqa: E402  (the lerobot_recorded fixture is conftest's)
from torch.utils.data import DataLoader  # noqa: E402

import lerobot_zarr  # noqa: E402
from lerobot_zarr.torch import LeRobotDataset, LeRobotDatasetMetadata  # noqa: E402


def _reference():
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset as Reference
    except ImportError as exc:
        pytest.skip(f"lerobot is installed but its LeRobotDataset does not import: {exc}")
    return Reference


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def assert_same(ref, ours, where: str = "") -> None:
    """LeRobot's value and ours: the same type, and for tensors the same dtype, shape and values, exactly."""
    if isinstance(ref, torch.Tensor):
        assert type(ours) is torch.Tensor, (where, type(ours))
        assert ours.dtype == ref.dtype and ours.shape == ref.shape, (where, ours.dtype, ref.dtype, ours.shape,
                                                                      ref.shape)
        assert torch.equal(ours, ref), where
    elif isinstance(ref, dict):
        assert isinstance(ours, dict) and list(ours) == list(ref) or set(ours) == set(ref), (where, set(ours) ^
                                                                                             set(ref))
        for key in ref:
            assert_same(ref[key], ours[key], f"{where}[{key!r}]")
    elif isinstance(ref, (list, tuple)):
        assert type(ours) is type(ref) and len(ours) == len(ref), (where, type(ours), len(ours), len(ref))
        for i, (a, b) in enumerate(zip(ref, ours, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert type(ours) is type(ref) and ours == ref, (where, ours, ref)


def reference_item(ref, i):
    """LeRobot's item ``i``, or None where LeRobot cannot decode its frame: its PyAV seek misses frames of HEVC files
    with open GOPs (LeRobot's own depth videos), which lerobot_zarr decodes (their values are checked against a
    full decode in test_lerobot_kinds.py)."""
    from lerobot.datasets.video_utils import FrameTimestampError

    try:
        return ref[i]
    except FrameTimestampError:
        return None


def assert_same_items(ref, ours, indices=None) -> list[int]:
    """Items of LeRobot's and ours are the same; returns the indices compared (all but those LeRobot cannot
    decode, at least half of them)."""
    assert len(ours) == len(ref) and ours.num_frames == ref.num_frames and ours.num_episodes == ref.num_episodes
    compared = []
    for i in range(len(ref)) if indices is None else indices:
        a, b = reference_item(ref, i), ours[i]
        if a is None:
            continue
        assert set(b) == set(a), (i, sorted(set(a) ^ set(b)))
        assert_same(a, b, f"item {i}")
        compared.append(i)
    assert len(compared) * 2 >= (len(ref) if indices is None else len(indices)), compared
    return compared


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_items_and_batches_equal_lerobots(lerobot_recorded, kind):
    """Every item, and every batch of a plain DataLoader (LeRobot's own collate function for language columns, as
    its training script), is LeRobot's: the same keys, types, dtypes (floats float32, integers int64, 0-d scalars),
    shapes and values (decoded frames and depth maps equal)."""
    from lerobot.utils.collate import lerobot_collate_fn

    folder = lerobot_recorded(kind)
    ref, ours = _reference()(REPO_ID, root=folder), LeRobotDataset(REPO_ID, root=folder)
    compared = set(assert_same_items(ref, ours))
    collate = lerobot_collate_fn if ref.meta.has_language_columns else None
    for j, b in enumerate(DataLoader(ours, batch_size=3, collate_fn=collate)):
        indices = range(3 * j, min(3 * j + 3, len(ref)))
        if not compared.issuperset(indices):
            continue
        a = (collate or torch.utils.data.default_collate)([ref[i] for i in indices])
        assert set(b) == set(a), (j, sorted(set(a) ^ set(b)))
        assert_same(a, b, f"batch {j}")


@pytest.mark.parametrize("kind, deltas", [
    ("numeric", {"s.float64": [-2 / FPS, 0.0, 1 / FPS], "v.int8": [0.0, 1 / FPS], "s.bool": [-1 / FPS, 0.0]}),
    ("video_av1", {"observation.images.top": [-1 / FPS, 0.0], "observation.state": [0.0, 1 / FPS, 2 / FPS]}),
    ("one_frame", {"observation.images.top": [-1 / FPS, 0.0, 1 / FPS], "action": [-1 / FPS, 0.0]}),
])
def test_windows_equal_lerobots(lerobot_recorded, kind, deltas):
    """delta_timestamps windows (and their _is_pad masks), at episode edges too, as LeRobot's."""
    folder = lerobot_recorded(kind)
    ref = _reference()(REPO_ID, root=folder, delta_timestamps=deltas)
    ours = LeRobotDataset(REPO_ID, root=folder, delta_timestamps=deltas)
    assert_same_items(ref, ours)


# ------------------------------------------------------------------------------------------------------- arguments


def test_every_argument_of_lerobots_in_its_place():
    """LeRobot's __init__ parameters, in order, of the same kind and default; ours follow, keyword-only; an unknown
    keyword is a TypeError."""
    theirs = list(inspect.signature(_reference().__init__).parameters.values())
    ours = list(inspect.signature(LeRobotDataset.__init__).parameters.values())
    assert [(p.name, p.kind, p.default) for p in ours[:len(theirs)]] == \
        [(p.name, p.kind, p.default) for p in theirs]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in ours[len(theirs):])
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata as ReferenceMeta

    theirs = list(inspect.signature(ReferenceMeta.__init__).parameters.values())
    ours = list(inspect.signature(LeRobotDatasetMetadata.__init__).parameters.values())
    assert [(p.name, p.kind, p.default) for p in ours] == [(p.name, p.kind, p.default) for p in theirs]
    with pytest.raises(TypeError, match="not_an_argument"):
        LeRobotDataset(REPO_ID, root="nowhere", not_an_argument=1)


def test_attributes_and_reader_are_lerobots(lerobot_recorded, tmp_path):
    """The instance attributes (``vars()``) of a dataset opened to read and of one created to record are LeRobot's
    (LeRobot's own test compares those of ``__init__`` and ``create``), and ``reader`` gives what LeRobot's
    ``DatasetReader`` gives for reading; the drop-in still pickles (DataLoader workers)."""
    import pickle

    Reference = _reference()
    folder = lerobot_recorded("video_av1")
    for episodes in (None, [2, 0]):
        ref = Reference(REPO_ID, root=folder, episodes=episodes)
        ours = LeRobotDataset(REPO_ID, root=folder, episodes=episodes)
        assert set(vars(ours)) == set(vars(ref))
        assert ours.writer is None and ours._is_finalized is False and ours._requested_root == ref._requested_root
        for name in ("num_frames", "num_episodes", "episodes", "root"):
            assert getattr(ours.reader, name) == getattr(ref.reader, name), name
        assert sorted(ours.reader.get_episodes_file_paths()) == sorted(ref.reader.get_episodes_file_paths())
        assert_same(ref.reader.get_item(1), ours.reader.get_item(1), "reader.get_item(1)")
        assert_same(ref.reader.hf_dataset[0]["index"], ours.reader.hf_dataset[0]["index"], "hf_dataset")
    back = pickle.loads(pickle.dumps(ours))
    assert set(vars(back)) == set(vars(ref)) and back.dataset is not None
    assert_same(ours[0], back[0], "unpickled")
    features = {"action": {"dtype": "float32", "shape": (2,), "names": None}}
    made = LeRobotDataset.create("x/ours", fps=FPS, features=features, root=tmp_path / "ours")
    theirs = Reference.create("x/ref", fps=FPS, features=features, root=tmp_path / "ref")
    assert set(vars(made)) == set(vars(theirs)) == set(vars(ref))
    made.finalize()
    theirs.finalize()


def test_episodes_and_episode_filter(lerobot_recorded):
    """``episodes`` keeps the order given (frames come in episode order); ``episode_filter`` is evaluated on
    ``meta.episodes`` rows and intersected with ``episodes``, as LeRobot's; matching nothing is LeRobot's
    ValueError, a key no row has its KeyError."""
    folder = lerobot_recorded("task_switch")
    Reference = _reference()
    for kwargs in ({"episodes": [2, 0]}, {"episode_filter": lambda ep: ep["length"] > 1},
                   {"episodes": [1, 2], "episode_filter": lambda ep: "pick" in ep["tasks"]}):
        ref, ours = Reference(REPO_ID, root=folder, **kwargs), LeRobotDataset(REPO_ID, root=folder, **kwargs)
        assert ours.episodes == ref.episodes
        assert_same_items(ref, ours)
    for bad, error in ((lambda ep: ep["length"] > 99, ValueError), (lambda ep: ep["no_such_column"], KeyError)):
        with pytest.raises(error) as theirs:
            Reference(REPO_ID, root=folder, episode_filter=bad)
        with pytest.raises(error) as ours:
            LeRobotDataset(REPO_ID, root=folder, episode_filter=bad)
        assert str(ours.value) == str(theirs.value)
    for cls in (Reference, LeRobotDataset):
        with pytest.raises(ValueError):
            cls(REPO_ID, root=folder, episodes=[])


def test_tolerance_s_as_lerobot_applies_it(lerobot_recorded):
    """delta_timestamps within ``tolerance_s`` of a frame are taken (rounded to it), as LeRobot does with the 0.04
    its users pass; outside it, LeRobot's ValueError."""
    folder = lerobot_recorded("video_av1")
    near = {"observation.state": [-0.13, 0.0, 0.07], "observation.images.top": [-0.098, 0.0]}
    ref = _reference()(REPO_ID, root=folder, delta_timestamps=near, tolerance_s=0.04)
    assert_same_items(ref, LeRobotDataset(REPO_ID, root=folder, delta_timestamps=near, tolerance_s=0.04))
    for tolerance in (1e-4, 0.02):
        with pytest.raises(ValueError, match="outside of tolerance"):
            _reference()(REPO_ID, root=folder, delta_timestamps=near, tolerance_s=tolerance)
        with pytest.raises(ValueError, match="outside of tolerance"):
            LeRobotDataset(REPO_ID, root=folder, delta_timestamps=near, tolerance_s=tolerance)
    with pytest.raises(ValueError, match="no_such_feature") as theirs:  # LeRobot's comes at each item, ours at open
        _reference()(REPO_ID, root=folder, delta_timestamps={"no_such_feature": [0.0]})[0]
    with pytest.raises(ValueError, match="no_such_feature") as ours:
        LeRobotDataset(REPO_ID, root=folder, delta_timestamps={"no_such_feature": [0.0]})
    assert str(theirs.value) in str(ours.value)
    text = lerobot_recorded("string")
    with pytest.raises(TypeError):
        _reference()(REPO_ID, root=text, delta_timestamps={"note": [0.0]})[0]
    with pytest.raises(TypeError, match="note"):
        LeRobotDataset(REPO_ID, root=text, delta_timestamps={"note": [0.0]})


@pytest.mark.parametrize("kind", ["video_av1", "image", "depth_video_log"])
def test_return_uint8(lerobot_recorded, kind):
    """``return_uint8=True``: RGB video frames as uint8 CHW (images and depth as before), as LeRobot's."""
    folder = lerobot_recorded(kind)
    ref = _reference()(REPO_ID, root=folder, return_uint8=True)
    ours = LeRobotDataset(REPO_ID, root=folder, return_uint8=True)
    assert_same_items(ref, ours)
    if kind == "video_av1":
        assert ours[0]["observation.images.top"].dtype == torch.uint8


@pytest.mark.parametrize("kind", ["depth_video_log", "depth_video_linear", "depth_image_uint16",
                                  "depth_image_float32"])
@pytest.mark.parametrize("unit", ["mm", "m"])
def test_depth_output_unit(lerobot_recorded, kind, unit):
    """Depth maps in the unit asked, and the depth stats rescaled to it, as LeRobot's."""
    folder = lerobot_recorded(kind)
    ref = _reference()(REPO_ID, root=folder, depth_output_unit=unit)
    ours = LeRobotDataset(REPO_ID, root=folder, depth_output_unit=unit)
    assert ours.depth_output_unit == unit and ours.meta.depth_keys == ref.meta.depth_keys == [
        "observation.images.depth"]
    assert_same_items(ref, ours)
    key = "observation.images.depth"
    assert set(ours.meta.stats[key]) == set(ref.meta.stats[key])
    for stat, want in ref.meta.stats[key].items():
        np.testing.assert_array_equal(ours.meta.stats[key][stat], want, err_msg=stat)
    with pytest.raises(ValueError, match="depth_output_unit"):
        LeRobotDataset(REPO_ID, root=folder, depth_output_unit="cm")


def _flip(image: torch.Tensor) -> torch.Tensor:
    return image.flip(-1) * 0.5


@pytest.mark.parametrize("kind", ["image", "video_av1", "depth_video_log"])
def test_image_transforms(lerobot_recorded, kind):
    """``image_transforms`` on every camera but depth ones (at construction, or set and cleared later), per item
    and in DataLoader batches, as LeRobot's; a transform that is not callable is LeRobot's TypeError."""
    folder = lerobot_recorded(kind)
    Reference = _reference()
    ref = Reference(REPO_ID, root=folder, image_transforms=_flip)
    ours = LeRobotDataset(REPO_ID, root=folder, image_transforms=_flip)
    assert_same_items(ref, ours)
    assert_same(next(iter(DataLoader(ref, batch_size=4))), next(iter(DataLoader(ours, batch_size=4))), "batch")
    plain_ref, plain = Reference(REPO_ID, root=folder), LeRobotDataset(REPO_ID, root=folder)
    plain.set_image_transforms(_flip)
    plain_ref.set_image_transforms(_flip)
    assert plain.image_transforms is _flip
    assert_same_items(plain_ref, plain)
    plain.clear_image_transforms()
    assert plain.image_transforms is None
    assert_same_items(Reference(REPO_ID, root=folder), plain)
    for bad in (lambda: LeRobotDataset(REPO_ID, root=folder, image_transforms=3),
                lambda: plain.set_image_transforms("flip")):
        with pytest.raises(TypeError, match="callable"):
            bad()


def test_arguments_about_decoding_and_recording(lerobot_recorded):
    """``video_backend`` takes LeRobot's names (frames are the same: PyAV decodes them) and refuses others as
    LeRobot does; ``download_videos=False`` leaves the video cameras out, saying so; the arguments that ask
    LeRobot's __init__ to resume recording are refused (the drop-in reads)."""
    folder = lerobot_recorded("video_av1")
    ref = _reference()(REPO_ID, root=folder)
    for backend in ("pyav", "torchcodec", None):
        assert_same_items(ref, LeRobotDataset(REPO_ID, root=folder, video_backend=backend), indices=[0, 5])
    with pytest.raises(ValueError, match="video backend"):
        LeRobotDataset(REPO_ID, root=folder, video_backend="ffmpeg-cli")
    with pytest.warns(UserWarning, match="download_videos=False"):
        no_videos = LeRobotDataset(REPO_ID, root=folder, download_videos=False)
    assert "observation.images.top" not in no_videos[0] and "observation.state" in no_videos[0]
    assert no_videos.left_out == {"observation.images.top": "download_videos=False"}
    for kwargs in ({"streaming_encoding": True}, {"batch_encoding_size": 2}):
        with pytest.raises(ValueError, match="record"):
            LeRobotDataset(REPO_ID, root=folder, **kwargs)


def test_slices_and_negative_indices(lerobot_recorded):
    """``ds[a:b:c]`` is LeRobot's list of items; negative indices count from the end; past the end, IndexError."""
    folder = lerobot_recorded("numeric")
    ref, ours = _reference()(REPO_ID, root=folder), LeRobotDataset(REPO_ID, root=folder)
    n = len(ref)
    for cut in (slice(None, 3), slice(None, None, 2), slice(4, None, -1), slice(-3, None), slice(n, None)):
        assert_same(ref[cut], ours[cut], str(cut))
    assert_same(ref[-1], ours[-1], "-1")
    with pytest.raises(IndexError):
        ours[n]


def test_recording_api_of_a_reading_dataset(lerobot_recorded):
    """LeRobot's recording methods on a dataset opened to read: the same RuntimeError; finalize does nothing."""
    folder = lerobot_recorded("numeric")
    ours = LeRobotDataset(REPO_ID, root=folder)
    for call in (lambda: ours.add_frame({"task": "x"}), ours.save_episode, ours.clear_episode_buffer):
        with pytest.raises(RuntimeError, match="read-only"):
            call()
    assert ours.has_pending_frames() is False and ours.writer is None
    ours.finalize()


# ------------------------------------------------------------------------------------------------------------ meta


def assert_same_meta(ref, ours) -> None:
    """``meta`` as LeRobot's: info (attribute access, the same dict), stats, tasks (a DataFrame indexed by task),
    the episode table (a datasets.Dataset with the same rows), keys, shapes, names and counts."""
    import pandas as pd
    from datasets import Dataset

    assert ours.info.to_dict() == ref.info.to_dict()
    assert ours.info.fps == ref.info.fps and ours.info.features == ref.info.features
    assert all(type(ft["shape"]) is tuple for ft in ours.features.values())
    for attr in ("repo_id", "revision", "fps", "robot_type", "features", "total_episodes", "total_frames",
                 "total_tasks", "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb", "data_path",
                 "video_path", "camera_keys", "video_keys", "image_keys", "depth_keys", "names", "shapes",
                 "has_language_columns", "latest_episode", "tools", "url_root"):
        assert getattr(ours, attr) == getattr(ref, attr), attr
    assert isinstance(ours.tasks, pd.DataFrame)
    pd.testing.assert_frame_equal(ours.tasks, ref.tasks)
    assert isinstance(ours.episodes, Dataset) and ours.episodes.column_names == ref.episodes.column_names
    assert ours.episodes.to_list() == ref.episodes.to_list()
    assert set(ours.stats) == set(ref.stats)
    for key, stats in ref.stats.items():
        assert set(ours.stats[key]) == set(stats), key
        for stat, want in stats.items():
            assert type(ours.stats[key][stat]) is np.ndarray and ours.stats[key][stat].shape == want.shape
            np.testing.assert_array_equal(ours.stats[key][stat], want, err_msg=f"{key} {stat}")
    for task in [*ref.tasks.index, "no such task"]:
        assert ours.get_task_index(task) == ref.get_task_index(task)
    for e in range(ref.total_episodes):
        assert ours.get_data_file_path(e) == ref.get_data_file_path(e)
        for key in ref.video_keys:
            assert ours.get_video_file_path(e, key) == ref.get_video_file_path(e, key)
    keep = lambda ep: ep["length"] > 1  # noqa: E731
    assert ours.filter_episodes(keep) == ref.filter_episodes(keep)
    assert ours.filter_episodes(keep, candidates=[0, 1]) == ref.filter_episodes(keep, candidates=[0, 1])


@pytest.mark.parametrize("kind", ["numeric", "task_switch", "video_av1", "image"])
def test_meta_is_lerobots(lerobot_recorded, kind):
    folder = lerobot_recorded(kind)
    ref, ours = _reference()(REPO_ID, root=folder), LeRobotDataset(REPO_ID, root=folder)
    assert_same_meta(ref.meta, ours.meta)
    assert ours.features is ours.meta.features and ours.root == ref.root and ours.revision == ref.revision
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # LeRobot's dict-style access, deprecated
        assert ours.meta.info["fps"] == ref.meta.info["fps"]


def test_meta_on_its_own_and_lerobots_home(lerobot_recorded, tmp_path, monkeypatch):
    """``LeRobotDatasetMetadata(repo_id, root)`` reads metadata alone, as LeRobot's (depth stats in their recorded
    unit: LeRobot's dataset, not its metadata, rescales them); without ``root`` both look in
    ``$HF_LEROBOT_HOME/<repo_id>`` first, and so does the drop-in."""
    import shutil

    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata as ReferenceMeta

    for kind in ("depth_image_float32", "depth_video_linear"):  # depth stats as recorded (metres) there
        folder = lerobot_recorded(kind)
        ref, ours = ReferenceMeta(REPO_ID, root=folder), LeRobotDatasetMetadata(REPO_ID, root=folder)
        assert_same_meta(ref, ours)
        ref.rescale_depth_stats("mm")
        ours.rescale_depth_stats("mm")
        assert_same_meta(ref, ours)
    folder = lerobot_recorded("task_switch")
    assert_same_meta(ReferenceMeta(REPO_ID, root=folder), LeRobotDatasetMetadata(REPO_ID, root=folder))
    home = tmp_path / "home"
    shutil.copytree(folder, home / "someone" / "recorded")
    monkeypatch.setenv("HF_LEROBOT_HOME", str(home))
    monkeypatch.setattr("lerobot.datasets.dataset_metadata.HF_LEROBOT_HOME", home)
    assert_same_meta(ReferenceMeta("someone/recorded"), LeRobotDatasetMetadata("someone/recorded"))
    ours = LeRobotDataset("someone/recorded")
    assert ours.root == home / "someone" / "recorded"
    assert_same_items(_reference()(REPO_ID, root=folder), ours, indices=[0, 3])


def test_tasks_replaced_name_the_items_tasks(lerobot_recorded):
    """Items name their task from ``meta.tasks`` as it is when read (LeRobot's tools replace it), per item and in
    batches."""
    import pandas as pd

    ours = LeRobotDataset(REPO_ID, root=lerobot_recorded("task_switch"))
    renamed = pd.DataFrame({"task_index": range(3)}, index=pd.Index(["a", "b", "c"], name="task"))
    ours.meta.tasks = renamed
    for i in range(len(ours)):
        assert ours[i]["task"] == "abc"[int(ours[i]["task_index"])]
    batch = next(iter(DataLoader(ours, batch_size=len(ours))))
    assert batch["task"] == ["abc"[int(t)] for t in batch["task_index"]]
    assert ours.meta.get_task_index("b") == 1 and ours.meta.get_task_index("pick") is None


@pytest.mark.parametrize("kind", ["numeric", "nd", "string"])
def test_hf_dataset_columns_are_lerobots(lerobot_recorded, kind):
    """``hf_dataset`` (made from the store): LeRobot's columns (but cameras and language columns), its rows, slices
    and ``select_columns`` giving the same values; ``get_raw_item`` a row."""
    folder = lerobot_recorded(kind)
    ref = _reference()(REPO_ID, root=folder, episodes=[0, 2])
    ours = LeRobotDataset(REPO_ID, root=folder, episodes=[0, 2])
    assert ours.hf_dataset.column_names == ref.hf_dataset.column_names and len(ours.hf_dataset) == len(ours)
    assert_same(ref.hf_dataset[1:4], ours.hf_dataset[1:4], "slice")
    keys = ref.hf_dataset.column_names[:2] + ["index"]
    assert_same(ref.select_columns(keys)[0:3], ours.select_columns(keys)[0:3], "select_columns")
    assert_same(ref.get_raw_item(2), ours.get_raw_item(2), "get_raw_item")


# ----------------------------------------------------------------------------------------- LeRobot's tools on it


def test_lerobots_tools_on_a_dropin(lerobot_recorded, tmp_path):
    """LeRobot's quantile-stats script, ``modify_features`` and ``aggregate_datasets`` take a drop-in (or its
    folders) and give what they give on LeRobot's own class."""
    from lerobot.datasets.aggregate import aggregate_datasets
    from lerobot.datasets.dataset_tools import modify_features
    from lerobot.scripts.augment_dataset_quantile_stats import compute_quantile_stats_for_dataset

    Reference = _reference()
    folder = lerobot_recorded("image")
    ref, ours = Reference(REPO_ID, root=folder), LeRobotDataset(REPO_ID, root=folder)
    assert_same(_as_tensors(compute_quantile_stats_for_dataset(ref, use_sampling=False)),
                _as_tensors(compute_quantile_stats_for_dataset(ours, use_sampling=False)), "quantiles")

    reward = np.arange(len(ours), dtype=np.float32)
    feature = {"reward": (reward, {"dtype": "float32", "shape": [1], "names": None})}
    got = modify_features(ours, add_features=feature, output_dir=tmp_path / "ours", repo_id="x/ours")
    want = modify_features(ref, add_features=feature, output_dir=tmp_path / "ref", repo_id="x/ref")
    assert_same_items(Reference("x/ref", root=tmp_path / "ref"), LeRobotDataset("x/ours", root=tmp_path / "ours"))
    assert_same_items(want, got)

    other = lerobot_recorded("image")
    aggregate_datasets([REPO_ID, REPO_ID], "x/both", roots=[folder, other], aggr_root=tmp_path / "both")
    assert_same_items(Reference("x/both", root=tmp_path / "both"), LeRobotDataset("x/both", root=tmp_path / "both"))
    assert_same_meta(Reference("x/both", root=tmp_path / "both").meta,
                     LeRobotDataset("x/both", root=tmp_path / "both").meta)


@pytest.mark.parametrize("kind", ["video_av1", "depth_video_log"])
def test_reencode_dataset_refreshes_the_video_info_as_on_lerobots(lerobot_recorded, tmp_path, kind):
    """LeRobot's ``reencode_dataset`` re-encodes a dataset's files in place and refreshes its info through
    ``meta.update_video_info``: on a drop-in it writes the info.json it writes on LeRobot's class (said in a warning:
    the drop-in's items keep the frames it read); a dataset opened again reads the new files as LeRobot's does."""
    import shutil

    from lerobot.configs.video import DepthEncoderConfig, RGBEncoderConfig
    from lerobot.datasets.dataset_tools import reencode_dataset
    from lerobot.datasets.io_utils import load_info

    Reference = _reference()
    depth = kind.startswith("depth")
    target = (DepthEncoderConfig(vcodec="hevc", pix_fmt="gray12le", g=6, crf=23) if depth else
              RGBEncoderConfig(vcodec="h264", g=6, crf=23, pix_fmt="yuv420p"))
    encoder = {"depth_encoder" if depth else "rgb_encoder": target}
    ref_root, ours_root = tmp_path / "ref", tmp_path / "ours"
    shutil.copytree(lerobot_recorded(kind), ref_root)
    shutil.copytree(lerobot_recorded(kind), ours_root)
    ref = reencode_dataset(Reference(REPO_ID, root=ref_root), num_workers=0, **encoder)
    ours = LeRobotDataset(REPO_ID, root=ours_root)
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match="items keep the frames it read when it was opened"):
        assert reencode_dataset(ours, num_workers=0, **encoder) is ours
    assert load_info(ours_root).to_dict() == load_info(ref_root).to_dict()
    key = ref.meta.video_keys[0]
    assert ours.meta.info.features[key]["info"] == ref.meta.info.features[key]["info"]
    assert ours.meta.info.features[key]["info"]["video.codec"] == ("hevc" if depth else "h264")
    assert_same_items(Reference(REPO_ID, root=ours_root), LeRobotDataset(REPO_ID, root=ours_root))
    with pytest.raises(ValueError, match="Video key nope not found in dataset"):
        ours.meta.update_video_info("nope")
    from_store = LeRobotDataset(REPO_ID, root=ours.dataset.root)
    with pytest.raises(lerobot_zarr.SourceNotFoundError, match="a LeRobot folder"):
        from_store.meta.update_video_info(key)


def _as_tensors(stats: dict) -> dict:
    return {k: {s: torch.as_tensor(np.asarray(v)) for s, v in st.items()} for k, st in stats.items()}


# -------------------------------------------------------------------------------------------------- RL buffer


def test_replay_buffer_next_state_none_with_optimize_memory(tmp_path):
    """``add(..., next_state=None)`` with ``optimize_memory=True`` (LeRobot accepts it): each transition's next state
    is the next add's state, a transition is sampled once the next add came (LeRobot samples below ``size - 1``),
    a finished episode's last one is stored with its own state at a checkpoint, one still waiting at close is said
    not stored; without optimize_memory, refused.
    ``to_lerobot_dataset`` writes LeRobot's fps 1 by default."""
    from lerobot_zarr.rl import ReplayBuffer

    states = [{"observation.state": torch.full((1, 2), float(k))} for k in range(4)]
    buffer = ReplayBuffer(10, "cpu", ["observation.state"], optimize_memory=True, root=tmp_path / "buf")
    for k in range(3):
        buffer.add(states[k], torch.full((1, 1), float(k)), float(k), None, k == 2, False)
    assert len(buffer) == buffer.size == 3

    def drawn() -> tuple[torch.Tensor, torch.Tensor]:
        batches = [buffer.sample(8) for _ in range(30)]
        return (torch.cat([b["state"]["observation.state"][:, 0] for b in batches]),
                torch.cat([b["next_state"]["observation.state"][:, 0] for b in batches]))

    state, after = drawn()
    assert set(state.tolist()) == {0.0, 1.0}  # the third waits for its next state
    torch.testing.assert_close(after, state + 1)
    buffer.checkpoint()  # the third ended its episode: stored, its next state its own
    state, after = drawn()
    assert set(state.tolist()) == {0.0, 1.0, 2.0}
    torch.testing.assert_close(after, torch.where(state == 2, state, state + 1))
    assert buffer.to_lerobot_dataset("x/buf", root=tmp_path / "exported").fps == 1
    buffer.add(states[3], torch.full((1, 1), 3.0), 3.0, None, False, False)  # its next state never comes
    assert len(buffer) == 4
    with pytest.warns(UserWarning, match="not stored"):
        buffer.close()
    assert len(ReplayBuffer(10, "cpu", ["observation.state"], root=tmp_path / "buf")) == 3
    plain = ReplayBuffer(10, "cpu", ["observation.state"], root=tmp_path / "plain")
    with pytest.raises(ValueError, match="optimize_memory"):
        plain.add(states[0], torch.zeros(1, 1), 0.0, None, False, False)


def test_replay_buffer_errors_are_lerobots(tmp_path):
    """A capacity of 0, sampling an empty buffer and exporting one: LeRobot's exception types and its words (which
    code and tests match on) in ours."""
    from lerobot.rl.buffer import ReplayBuffer as Reference

    from lerobot_zarr.rl import ReplayBuffer

    calls = {"capacity 0": lambda cls, **kw: cls(0, "cpu", **kw),
             "empty sample": lambda cls, **kw: cls(4, "cpu", **kw).sample(2),
             "empty export": lambda cls, **kw: cls(4, "cpu", **kw).to_lerobot_dataset("x/y", root=tmp_path / "out")}
    for what, call in calls.items():
        with pytest.raises(Exception) as theirs:
            call(Reference)
        with pytest.raises(type(theirs.value)) as ours:
            call(ReplayBuffer, root=tmp_path / what)
        assert str(theirs.value).strip() in str(ours.value), (what, str(ours.value))


# ---------------------------------------------------------------------------------------------------------- Hub


def test_hub_repo_read_into_root(lerobot_recorded, tmp_path, monkeypatch):
    """From the Hub (the project's test Hub): only the episodes asked for are fetched, into a store at ``root`` when
    given (where LeRobot downloads its files), which later opens without the network; ``revision`` picks the tag;
    ``force_cache_sync`` reads the Hub though ``root`` holds a dataset (never writing into that folder);
    LeRobotDatasetMetadata(repo_id) reads the metadata alone. Items are LeRobot's (of the recorded folder)."""
    from hub_fixtures import make_env

    from lerobot_zarr.testing.hub_server import HubServer

    folder = lerobot_recorded("task_switch")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with HubServer(tmp_path / "server") as server:
        env = make_env(monkeypatch, tmp_path, server.endpoint)
        server.add_repo("someone/recorded", folder, tags=["v3.0"])
        ref = _reference()(REPO_ID, root=folder, episodes=[2])
        ours = LeRobotDataset("someone/recorded", root=tmp_path / "here", episodes=[2], revision="v3.0")
        assert ours.root == tmp_path / "here" and (tmp_path / "here" / "zarr.json").exists()
        assert_same_items(ref, ours)
        from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata as ReferenceMeta

        assert_same_meta(ReferenceMeta("someone/recorded", root=folder),
                         LeRobotDatasetMetadata("someone/recorded", revision="v3.0"))
        other = lerobot_recorded("image")  # force_cache_sync: the Hub's, though root holds a dataset (left as is)
        before = sorted(p.relative_to(other) for p in other.rglob("*"))
        assert_same_items(ref, LeRobotDataset("someone/recorded", root=other, episodes=[2], force_cache_sync=True))
        assert sorted(p.relative_to(other) for p in other.rglob("*")) == before
        env.offline()
        again = LeRobotDataset("someone/recorded", root=tmp_path / "here", episodes=[2])
        assert_same_items(ref, again)
