"""The thread keeping LeRobot's files beside a store being recorded (``lerobot_recorder._Beside``): it looks for the
segments an export waits for less and less often (up to a bound; soon again after each saved episode) and says so
once when they are long in coming, an export under way is abandoned at ``stop()``, and the thread stops when its
recorder is garbage collected without ``finalize``; a spill's per-frame histograms take the smallest dtype that holds
them, its stats exact."""

from __future__ import annotations

import contextlib
import gc
import logging
import threading

import numpy as np
import pytest

import lerobot_zarr.integrations.lerobot_recorder as recorder_module
import lerobot_zarr.sampling.dataset as dataset_module
import lerobot_zarr.writing.export as export_module
from lerobot_zarr.integrations.lerobot_recorder import Recorder, _Beside


@contextlib.contextmanager
def _no_dataset(root):
    yield None


class _Wake:
    """The thread's event, scripted: each wait returns the next of ``woken`` (True: a new commit), and the thread
    is stopped at the ``stop_at``-th wait."""

    def __init__(self, beside: _Beside, woken: list[bool], stop_at: int):
        self.beside, self.woken, self.stop_at, self.waits = beside, list(woken), stop_at, []

    def wait(self, timeout):
        self.waits.append(timeout)
        if len(self.waits) == self.stop_at:
            self.beside._stopping = True
        return self.woken.pop(0) if self.woken else False

    def set(self):
        pass

    def clear(self):
        pass


def test_segments_long_in_coming_are_looked_for_less_often_and_logged_once(tmp_path, monkeypatch, caplog):
    beside = _Beside(tmp_path, background=True)
    beside._wake = wake = _Wake(beside, [True, False, False, False, True], stop_at=12)
    monkeypatch.setattr(dataset_module, "LeRobotZarrDataset", _no_dataset)
    monkeypatch.setattr(beside, "_export", lambda ds: False)  # segments missing: the export waits
    clock = iter(range(0, 10_000, 20))  # 20 s between two looks
    monkeypatch.setattr(recorder_module.time, "monotonic", lambda: float(next(clock)))
    with caplog.at_level(logging.WARNING, logger=recorder_module.__name__):
        beside._run()
    assert wake.waits == [None, 0.25, 0.5, 1.0, 2.0, 0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert len([r for r in caplog.records if "wait for the videos" in r.getMessage()]) == 1


def test_stop_abandons_an_export_under_way_before_its_videos(tmp_path, monkeypatch):
    beside = _Beside(tmp_path, background=True)
    started, moved = threading.Event(), []

    def export_beside(ds, *, cache, encode, before_videos):
        started.set()
        for _ in range(1000):  # until stop() asks (bounded)
            if beside._stopping:
                break
            threading.Event().wait(0.01)
        before_videos()
        moved.append(True)
        return True

    monkeypatch.setattr(dataset_module, "LeRobotZarrDataset", _no_dataset)
    monkeypatch.setattr(export_module, "export_beside", export_beside)
    beside.saved(None)
    assert started.wait(60)
    thread = beside._thread
    beside.stop()
    assert not thread.is_alive() and moved == []


def test_the_thread_stops_when_its_recorder_is_collected_without_finalize(tmp_path, monkeypatch):
    from lerobot_zarr.writing.writer import create

    features = {"observation.state": {"dtype": "float32", "shape": [2], "names": None},
                "observation.images.cam": {"dtype": "image", "shape": [4, 6, 3],
                                           "names": ["height", "width", "channels"]}}
    store = create(tmp_path / "ds", fps=10, features=features, durable=False)
    try:
        recorder = Recorder(store, {**store.reader.meta.info["features"]}, on_saved=lambda: None)
        monkeypatch.setattr(dataset_module, "LeRobotZarrDataset", _no_dataset)
        monkeypatch.setattr(recorder._beside, "_export", lambda ds: False)  # pending: it would look forever
        recorder._beside.saved(None)
        thread = recorder._beside._thread
        assert thread.is_alive()
        del recorder
        gc.collect()
        thread.join(60)
        assert not thread.is_alive()
    finally:
        store.close()


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
