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


def test_stopping_the_spill_writer_never_blocks_and_its_frames_are_still_written():
    """``_SpillWriter.stop`` runs in the recorder's weakref finalizer, possibly in the spill thread itself (a garbage
    collection there): with its queue full it returns at once, and the thread ends once it wrote the frames queued.
    A frame that would pass the queue's bytes waits for the writer to make room (add_frame's backpressure)."""
    import threading

    from lerobot_zarr.integrations.lerobot_recorder import _SpillWriter

    class Slow:  # a spill whose writes wait until released
        def __init__(self):
            self.release, self.started, self.frames = threading.Event(), threading.Event(), []

        def append(self, frame):
            self.started.set()
            assert self.release.wait(60)
            self.frames.append(int(frame[0]))

    frames = [np.full(8, k, np.uint8) for k in range(3)]
    spill, writer = Slow(), _SpillWriter(max_bytes=16)
    writer.put(spill, frames[0])
    assert spill.started.wait(60)  # the thread is writing frame 0
    writer.put(spill, frames[1])  # the queue is full: 16 bytes
    third = threading.Thread(target=writer.put, args=(spill, frames[2]), daemon=True)
    third.start()
    third.join(0.2)
    assert third.is_alive(), "a frame past the queue's bytes was queued"
    stopper = threading.Thread(target=writer.stop, daemon=True)
    stopper.start()
    stopper.join(30)
    assert not stopper.is_alive(), "stop() blocked on the full queue"
    spill.release.set()
    third.join(60)
    writer._thread.join(60)
    assert not writer._thread.is_alive() and spill.frames[:2] == [0, 1]


def test_commands_not_delivered_are_logged_and_nothing_else_writes_to_the_pipes(tmp_path, monkeypatch, caplog):
    """A command to an encoder stuck in delivery (a stopped encoder, its pipe full) holds the commands behind it:
    closing the encoders logs it and leaves the close to the thread that delivers them, in order (a direct write
    would interleave with the one under way), done once the stuck one is."""
    import logging
    import threading

    import lerobot_zarr.integrations.lerobot_encoders as encoders_module
    from lerobot_zarr.writing.segments import Gate

    monkeypatch.setattr(encoders_module, "DELIVERY_TIMEOUT", 0.2)

    class Process:  # a background encoder's pipe, as the recorder writes to it
        cameras = ["cam"]

        def __init__(self):
            self.writes, self.writing, self.unstuck = [], threading.Event(), threading.Event()

        def stream(self, camera, path):
            self.writing.set()
            assert self.unstuck.wait(60)
            self.writes.append(("stream", threading.current_thread().name))

        def close(self):
            self.writes.append(("close", threading.current_thread().name))

    encoders = encoders_module.Encoders(tmp_path, ["cam"], None, Gate(tmp_path / "gate"))
    process = Process()
    encoders.processes = [process]
    encoders.stream({"cam": tmp_path / "spill"})
    assert process.writing.wait(60)
    with caplog.at_level(logging.WARNING, logger=encoders_module.__name__):
        encoders.close()
    assert any("not delivered" in r.getMessage() for r in caplog.records) and process.writes == []
    process.unstuck.set()
    assert encoders._delivered(60)
    assert process.writes == [("stream", "lerobot_zarr-notify"), ("close", "lerobot_zarr-notify")]
    encoders.processes = []  # (no process to reap)
    encoders.release()
    encoders.gate.close()


def test_keep_up_looks_at_every_camera_once_its_share_of_a_frame_period_is_spent():
    """add_frame's wait for streaming encoders (frames given faster than the fps): once its share of a frame period
    is spent on a camera a few frames behind, the next camera is still looked at, and waited for while it is more
    than encoder_queue_maxsize frames behind (it was never looked at: the wait returned at the first camera)."""
    import types

    from lerobot_zarr.integrations.lerobot_recorder import Recorder

    class Spill:  # a camera's encoder progress, as the recorder reads it
        def __init__(self, encoded: int, step: int):
            self.value, self.step, self.looks = encoded, step, 0

        def progress(self) -> tuple[int, int]:  # (taken, given back encoded)
            self.looks += 1
            self.value += self.step
            return self.value, self.value

    frames, queue = 200, 30
    behind, far = Spill(frames - 5, 0), Spill(frames - 100, 1)  # a camera stuck 5 behind, one 100 behind, encoding
    running = types.SimpleNamespace(process=types.SimpleNamespace(poll=lambda: None))
    fake = types.SimpleNamespace(_queue_frames=queue, _fps=30.0, _streamable=["a", "b"],
                                 _spills={"a": behind, "b": far},
                                 _streaming_encoder=types.SimpleNamespace(process=lambda key: running),
                                 _store=types.SimpleNamespace(root="store"), _unpaced=False)
    Recorder._keep_up(fake, frames)
    assert behind.looks >= 1 and far.looks > 1 and frames - far.value <= queue and not fake._unpaced
