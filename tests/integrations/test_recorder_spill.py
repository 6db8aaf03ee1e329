"""A recorder's spill (``lerobot_recorder._Spill``): its per-frame histograms take the smallest dtype that holds
them, its stats exact."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize(("shape", "dtype"), [((480, 640, 3), np.uint16), ((299, 299, 1), np.uint32)])
def test_a_spill_keeps_each_frames_histogram_in_the_smallest_dtype_and_its_stats_exact(tmp_path, shape, dtype):
    """480x640 frames are counted on 120x160 pixels (uint16 histograms, half of uint32's memory); 299x299 ones on
    all 89401 (more than uint16 holds: a frame of one value must not wrap). The stats equal image_stats's."""
    from lerobot_zarr.integrations.lerobot_recorder import _Spill
    from lerobot_zarr.lerobot.format import image_stats

    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (4, *shape), dtype=np.uint8)
    frames[1] = 7  # every pixel of a channel the same value: its count is the pixel count
    spill = _Spill(tmp_path, "cam", shape, np.uint8, writeback=False)
    try:
        for frame in frames:
            spill.append(frame)
        assert {h.dtype for h in spill.histograms} == {np.dtype(dtype)}
        got, want = spill.stats(), image_stats(frames)
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    finally:
        spill.close()
