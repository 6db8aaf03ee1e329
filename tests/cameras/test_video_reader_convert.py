"""FrameConverter's direct conversion keeps PyAV's values when one converter meets several conversion settings in
turn (frame sizes, pixel formats, colour ranges, output formats): a setting's context is made anew for it, and a
frame never goes through the context of another setting. Tiny frames made here (no video file)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

av = pytest.importorskip("av", reason="PyAV (the video extra) is not installed")
reformatter = pytest.importorskip("av.video.reformatter", reason="PyAV (the video extra) is not installed")

from lerobot_zarr.cameras import frame_convert
from lerobot_zarr.cameras.video import frame_pixels


def picture(shape: tuple[int, int], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)


def decoded_like(shape: tuple[int, int], fmt: str, seed: int, full_range: bool = False):
    """A frame in ``fmt`` (as a decoder gives one), from a random rgb24 picture."""
    frame = av.VideoFrame.from_ndarray(picture(shape, seed), format="rgb24").reformat(format=fmt)
    if full_range:
        frame.color_range = 2  # AVCOL_RANGE_JPEG: other conversion coefficients than the default (MPEG) range
    return frame


@pytest.mark.parametrize("target", ["rgb24", "rgba"])
def test_one_converter_alternating_settings_gives_pyavs_values(monkeypatch, target):
    """Frames of three sizes, two pixel formats and two colour ranges, converted in an interleaved order by one
    converter, each equal to PyAV's own conversion; on Linux, every frame after a setting's first (checked against
    PyAV's) goes straight into its destination."""
    monkeypatch.setattr(frame_convert, "_trusted", {})
    channels = 3 if target == "rgb24" else 4
    settings = [((48, 64), "yuv420p", False), ((36, 58), "yuv420p", False), ((48, 64), "yuv444p", False),
                ((48, 64), "yuv420p", True), ((16, 16), "yuv420p", False)]
    converter = frame_convert.FrameConverter(target, reformatter.VideoReformatter())
    rounds = 4
    for r in range(rounds):
        for k, (shape, fmt, full) in enumerate(settings):
            frame = decoded_like(shape, fmt, seed=10 * r + k, full_range=full)
            want = frame_pixels(frame, target, reformatter.VideoReformatter()).reshape(*shape, channels)
            dst = np.full((*shape, channels), 7, np.uint8)
            converter.convert_into(frame, dst)
            assert np.array_equal(dst, want), (r, shape, fmt, full)
    if sys.platform.startswith("linux"):
        trusted = sum(frame_convert._trusted.values())
        assert trusted >= 1
        assert converter.direct == trusted * (rounds - 1)  # each trusted setting's later frames, none other
    converter.close()


def test_a_row_of_a_batch_and_a_strided_destination():
    """Rows of one batch array (the reader's destination) and a destination that is not contiguous get the same
    values as PyAV's conversion; the one not contiguous is never written by swscale."""
    converter = frame_convert.FrameConverter("rgb24", reformatter.VideoReformatter())
    shape = (48, 64)
    batch = np.zeros((3, *shape, 3), np.uint8)
    wide = np.zeros((*shape, 4), np.uint8)
    for j in range(3):
        frame = decoded_like(shape, "yuv420p", seed=j)
        want = frame_pixels(frame, "rgb24", reformatter.VideoReformatter()).reshape(*shape, 3)
        converter.convert_into(frame, batch[j])
        assert np.array_equal(batch[j], want)
        direct = converter.direct
        converter.convert_into(frame, wide[..., :3])
        assert converter.direct == direct and np.array_equal(wide[..., :3], want) and not wide[..., 3].any()
    converter.close()
