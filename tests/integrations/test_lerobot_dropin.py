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

from lerobot_recorded import FPS, KINDS, REPO_ID, lerobot_recorded  # noqa: E402, F401  (the fixture)
from torch.utils.data import DataLoader  # noqa: E402

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


def assert_same_items(ref, ours, indices=None) -> None:
    assert len(ours) == len(ref) and ours.num_frames == ref.num_frames and ours.num_episodes == ref.num_episodes
    for i in range(len(ref)) if indices is None else indices:
        a, b = ref[i], ours[i]
        assert set(b) == set(a), (i, sorted(set(a) ^ set(b)))
        assert_same(a, b, f"item {i}")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_items_and_batches_equal_lerobots(lerobot_recorded, kind):
    """Every item, and every batch of a plain DataLoader, is LeRobot's: the same keys, types, dtypes (floats
    float32, integers int64, 0-d scalars), shapes and values (decoded frames and depth maps equal)."""
    folder = lerobot_recorded(kind)
    ref, ours = _reference()(REPO_ID, root=folder), LeRobotDataset(REPO_ID, root=folder)
    assert_same_items(ref, ours)
    for j, (a, b) in enumerate(zip(DataLoader(ref, batch_size=3), DataLoader(ours, batch_size=3), strict=True)):
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
