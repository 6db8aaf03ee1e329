"""Per-episode mp4 segments (lerobot_zarr.writing.segments): the background encoder's process makes them, an export
joins a valid one without encoding the episode again and gives the same decoded frames as an export that encodes
every episode; a killed encoder, a damaged segment and an edited episode never put wrong frames in an export."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

av = pytest.importorskip("av", reason="PyAV is not installed (the video extra): no mp4 to encode")

import lerobot_zarr  # noqa: E402
import lerobot_zarr.writing.export as export_module  # noqa: E402
import lerobot_zarr.writing.export_videos as videos_module  # noqa: E402
from lerobot_zarr.cameras.video import SVT_PARAMS_ENV  # noqa: E402
from lerobot_zarr.sampling.dataset import LeRobotZarrDataset  # noqa: E402
from lerobot_zarr.writing.segments import (  # noqa: E402
    SEGMENTS,
    BackgroundEncoder,
    camera_encodings,
    encode_in_parallel,
    encode_missing,
    find_segment,
)
from lerobot_zarr.writing.stream_encoding import progress_path  # noqa: E402
from lerobot_zarr.writing.writer import WritableDataset  # noqa: E402

CAM = "observation.images.cam"
SHAPE = (32, 48, 3)
LENGTHS = (12, 9, 15)
FEATURES = {"observation.state": {"dtype": "float32", "shape": [2], "names": None},
            CAM: {"dtype": "video", "shape": list(SHAPE), "names": ["height", "width", "channels"]}}


def _frames(e: int, n: int) -> np.ndarray:
    """Frames an encoder cannot skip: a moving ramp and noise, different per episode."""
    rng = np.random.default_rng(e)
    ramp = (np.add.outer(np.arange(SHAPE[0]), np.arange(SHAPE[1]))[None, :, :, None] * 3
            + 11 * np.arange(n)[:, None, None, None] + 40 * e)
    return ((ramp + rng.integers(0, 20, (n, *SHAPE))) % 256).astype(np.uint8)


def _store(root: Path, lengths=LENGTHS) -> Path:
    ds = lerobot_zarr.create(root, fps=30, features=FEATURES)
    try:
        for e, n in enumerate(lengths):
            ds.add_episode({"observation.state": np.full((n, 2), e, np.float32), CAM: _frames(e, n)}, task="t")
    finally:
        ds.close()
    return root


def _segments(root: Path) -> list[str]:
    return [p.name for p in (root / SEGMENTS).iterdir() if not p.name.startswith(".")]


def _decoded(export: Path) -> list[np.ndarray]:
    """Every frame of the export's camera, decoded file by file in order (episodes are consecutive)."""
    out = []
    for path in sorted((export / "videos" / CAM).rglob("*.mp4")):
        with av.open(str(path)) as c:
            out += [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]
    return out


@pytest.fixture
def encodes(monkeypatch):
    """How many episodes an export encodes (segments it had to make) instead of joining the store's."""
    calls: list[int] = []
    real = videos_module.make_segment

    def counted(ds, encoding, episode, *args, **kwargs):
        calls.append(episode)
        return real(ds, encoding, episode, *args, **kwargs)

    monkeypatch.setattr(videos_module, "make_segment", counted)
    return calls


def _export(root: Path, out: Path, **kwargs) -> Path:
    return Path(export_module.to_lerobot(root, out, progress=False, **kwargs))


def test_an_export_joins_the_segments_and_decodes_as_one_that_encodes(tmp_path, encodes):
    plain = _export(_store(tmp_path / "plain"), tmp_path / "out_plain")
    assert encodes == [0, 1, 2]
    root = _store(tmp_path / "store")
    assert encode_missing(root) == 3
    assert len(_segments(root)) == 3
    encodes.clear()
    joined = _export(root, tmp_path / "out_joined")
    assert encodes == [], "an episode with a valid segment was encoded again"
    a, b = _decoded(plain), _decoded(joined)
    assert len(a) == len(b) == sum(LENGTHS)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    # and the joined file reads back as the store's episodes, at their timestamps (lossy, so: close)
    back = LeRobotZarrDataset(lerobot_zarr.open_dataset(joined, root=tmp_path / "back", progress=False).root)
    for e, n in enumerate(LENGTHS):
        got = np.asarray(back.episode(e)[CAM]).astype(np.int16)
        assert got.shape == (n, *SHAPE) and np.abs(got - _frames(e, n)).mean() < 12, e
    assert encode_missing(root) == 0, "segments made again"


def test_segments_follow_the_encoder_settings(tmp_path, encodes, monkeypatch):
    """A segment made with other encoder settings (another name) is not joined: the export encodes."""
    root = _store(tmp_path / "store")
    encode_missing(root)
    monkeypatch.setenv(SVT_PARAMS_ENV, "lp=1:fast-decode=1")
    _export(root, tmp_path / "out")
    assert encodes == [0, 1, 2]
    encodes.clear()
    encode_missing(root)
    _export(root, tmp_path / "out1")
    assert encodes == []


def test_a_damaged_or_truncated_segment_is_not_joined(tmp_path, encodes):
    root = _store(tmp_path / "store")
    encode_missing(root)
    ds = LeRobotZarrDataset(root)
    encoding = camera_encodings(ds, [CAM])[CAM]
    paths = [find_segment(ds, encoding, e) for e in range(3)]
    assert all(p is not None for p in paths)
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[: len(data) // 2])  # half a file under the segment's name
    paths[2].write_bytes(paths[0].read_bytes())  # another episode's segment
    assert find_segment(ds, encoding, 0) == paths[0]
    assert find_segment(ds, encoding, 1) is None and find_segment(ds, encoding, 2) is None
    out = _export(root, tmp_path / "out")
    assert encodes == [1, 2]
    want = _decoded(_export(_store(tmp_path / "plain"), tmp_path / "out_plain"))
    assert all(np.array_equal(x, y) for x, y in zip(_decoded(out), want, strict=True))


def test_an_edited_episode_is_encoded_again(tmp_path, encodes):
    """An in-place edit changes the episode's content hash, so its segment's name: the old one is not joined."""
    root = _store(tmp_path / "store")
    encode_missing(root)
    with WritableDataset(root) as ds, ds.edit(1, features=[CAM]) as ep:
        ep[CAM][:] = 255 - np.asarray(ep[CAM])
    out = _export(root, tmp_path / "out")
    assert encodes == [1]
    edited = 255 - _frames(1, LENGTHS[1]).astype(np.int16)
    frames = _decoded(out)[LENGTHS[0]:LENGTHS[0] + LENGTHS[1]]
    assert np.abs(np.stack(frames).astype(np.int16) - edited).mean() < 12, "the stale segment's frames were used"
    encodes.clear()
    # the export kept the edited episode's segment and removed the stale one (no episode has it any more)
    assert len(_segments(root)) == 3, "the stale segment was not pruned by the export"
    assert encode_missing(root, prune=True) == 0 and len(_segments(root)) == 3


def test_an_export_keeps_the_segments_it_encodes(tmp_path, encodes):
    """A store without segments: the first export encodes every episode and keeps each as the store's segment, a
    second export of the unchanged store encodes nothing and gives the same files."""
    root = _store(tmp_path / "store")
    first = _export(root, tmp_path / "first")
    assert encodes == [0, 1, 2] and len(_segments(root)) == 3
    encodes.clear()
    second = _export(root, tmp_path / "second")
    assert encodes == [], "an unchanged episode was encoded again"
    files = sorted(p.relative_to(first) for p in (first / "videos").rglob("*.mp4"))
    assert files and files == sorted(p.relative_to(second) for p in (second / "videos").rglob("*.mp4"))
    assert all((first / f).read_bytes() == (second / f).read_bytes() for f in files)


def test_a_store_that_cannot_keep_segments_still_exports(tmp_path, encodes, monkeypatch):
    import lerobot_zarr.writing.segments as segments_module

    real = segments_module.replace_file

    def refused(tmp, target):  # the store's folder refuses the segment (a read-only store), a temporary folder not
        if SEGMENTS in Path(target).parts:
            raise PermissionError(13, "Permission denied (test)")
        return real(tmp, target)

    plain = _export(_store(tmp_path / "plain"), tmp_path / "out_plain")
    root = _store(tmp_path / "store")
    monkeypatch.setattr(segments_module, "replace_file", refused)
    out = _export(root, tmp_path / "out")
    assert not (root / SEGMENTS).exists() or not _segments(root)
    a, b = _decoded(plain), _decoded(out)
    assert len(a) == len(b) == sum(LENGTHS) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_compact_cameras_get_segments(tmp_path, encodes):
    """A camera kept compact (frames encoded one by one in the store): the encoder makes its episodes' segments
    from the stored bytes it checks against their recorded hash, the export joins them, and the export decodes as
    one that encodes every episode; a compact episode whose bytes do not match its hash gets no segment."""
    source = _export(_store(tmp_path / "raw"), tmp_path / "lerobot")
    root = Path(lerobot_zarr.open_dataset(source, root=tmp_path / "compact", storage={CAM: "compact"},
                                          progress=False).root)
    assert LeRobotZarrDataset(root).array_specs[CAM].storage == "compact"
    shutil.rmtree(root / SEGMENTS, ignore_errors=True)
    encodes.clear()
    plain = _export(root, tmp_path / "out_plain")  # encodes every episode (and keeps them: dropped below)
    assert encodes == [0, 1, 2]
    shutil.rmtree(root / SEGMENTS)
    assert encode_missing(root) == 3 and len(_segments(root)) == 3
    encodes.clear()
    joined = _export(root, tmp_path / "out_joined")
    assert encodes == [], "a compact episode with a valid segment was encoded again"
    a, b = _decoded(plain), _decoded(joined)
    assert len(a) == len(b) == sum(LENGTHS) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    # a byte of episode 1's stored frames changed: its hash no longer matches, no segment is made of it
    shutil.rmtree(root / SEGMENTS)
    ds = LeRobotZarrDataset(root)
    state = ds.gather_layout()["state"]
    pack, offset = int(state.table.chunk[1]), int(state.table.offset[1])
    from lerobot_zarr.store.packs import open_array_pack, read_shard_index

    fd = open_array_pack(root, CAM, ds.array_specs[CAM], pack, int(state.packs.rows[pack]), os.O_RDWR)
    try:
        start, nbytes = read_shard_index(fd, ds.array_specs[CAM], int(state.packs.rows[pack]), offset, 1, "t")[0]
        byte = os.pread(fd, 1, int(start) + int(nbytes) // 2)
        os.pwrite(fd, bytes([byte[0] ^ 0xFF]), int(start) + int(nbytes) // 2)
    finally:
        os.close(fd)
    ds.close()
    assert encode_missing(root) == 2
    encoding = camera_encodings(LeRobotZarrDataset(root), [CAM])[CAM]
    assert find_segment(LeRobotZarrDataset(root), encoding, 1) is None


# the tests' encoders run at the tests' priority: at nice 19 beside the suite's other worker one can wait minutes for
# a CPU (by design: what it has not made by a push, the push encodes)


def _wait_for(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def test_the_background_process_encodes_what_is_committed(tmp_path, encodes):
    root = _store(tmp_path / "store", lengths=(10,))
    with WritableDataset(root) as ds:
        encoder = BackgroundEncoder(root, nice=0)
        try:
            ds.add_episode({"observation.state": np.zeros((8, 2), np.float32), CAM: _frames(5, 8)}, task="t")
            encoder.notify()
            encoder.flush()  # every committed episode has its segment once this returns
            assert len(_segments(root)) == 2
        finally:
            encoder.close()
            encoder.wait()
    assert encoder.process.returncode == 0
    _export(root, tmp_path / "out")
    assert encodes == []


def test_a_killed_encoder_leaves_no_segment_served_and_the_export_completes(tmp_path, encodes):
    """SIGKILL while a segment is being written: its temporary file is debris (never joined, removed by the
    store's next writer); the export encodes the episodes without a segment and gives the frames of a plain one."""
    root = _store(tmp_path / "store", lengths=(400, 400))
    folder = root / SEGMENTS
    for _ in range(5):  # on a loaded machine the encoder may finish before the kill lands: then again
        encoder = BackgroundEncoder(root, nice=0)
        try:
            _wait_for(lambda: _writing_or_done(encoder, folder), "the encoder to start writing a segment")
            os.kill(encoder.pid, signal.SIGKILL)
            encoder.process.wait()  # (not BackgroundEncoder.wait, which removes them: as if its recorder died too)
        finally:
            if encoder.process.poll() is None:
                encoder.cancel()
        debris = [p for p in folder.iterdir() if p.name.startswith(".")]
        if debris:
            break
        shutil.rmtree(folder)
    assert debris and all(".tmp-" in p.name for p in debris)
    assert encoder.flush() is False  # it ended without making them all: the export encodes the others
    served = [p.name for p in folder.iterdir() if not p.name.startswith(".")]
    assert len(served) <= 1
    out = _export(root, tmp_path / "out")
    assert len(encodes) == 2 - len(served)
    want = _export(_store(tmp_path / "plain", lengths=(400, 400)), tmp_path / "out_plain")
    assert all(np.array_equal(x, y) for x, y in zip(_decoded(out), _decoded(want), strict=True))
    WritableDataset(root).close()  # the next writer removes the debris
    names = [p.name for p in folder.iterdir()]
    assert not [n for n in names if n.startswith(".")] and set(served) <= set(names)
    assert len(names) == 2  # the export kept the segments it encoded
    encoder.process.stdout.close()


def test_a_killed_encoders_temporary_files_are_removed_once_it_is_waited_for(tmp_path):
    """The recorder waiting for an encoder that did not exit cleanly (killed, or a camera's work failed) removes
    the temporary files it left (a thread of it making a file is not unwound), not only the store's next writer."""
    root = _store(tmp_path / "store", lengths=(400,))
    folder = root / SEGMENTS
    for _ in range(5):  # on a loaded machine the encoder may finish before the kill lands: then again
        encoder = BackgroundEncoder(root, nice=0)
        _wait_for(lambda: _writing_or_done(encoder, folder), "the encoder to start writing a segment")
        os.kill(encoder.pid, signal.SIGKILL)
        encoder.process.wait()
        if any(p.name.startswith(".") for p in folder.iterdir()):
            break
        encoder.wait()
        shutil.rmtree(folder)
    assert any(p.name.startswith(".") for p in folder.iterdir())
    encoder.wait()
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]


def test_cancel_stops_the_encoder_and_removes_its_temporary_file(tmp_path):
    root = _store(tmp_path / "store", lengths=(400,))
    encoder = BackgroundEncoder(root, nice=0)
    folder = root / SEGMENTS
    _wait_for(lambda: _writing_or_done(encoder, folder), "the encoder to start writing a segment")
    writing = any(p.name.startswith(".") for p in folder.iterdir())
    encoder.cancel()
    assert encoder.process.returncode is not None  # ended (SIGTERM, or done already on a loaded machine)
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == [], "its temporary file is left"
    if not writing:  # it made the segment before a look saw it being written: then it is whole
        assert len(_segments(root)) == 1


def _writing_or_done(encoder: BackgroundEncoder, folder) -> bool:
    """Whether the encoder is writing a segment (its temporary file), has made one, or has ended (its error is then
    the test's next failure, not a wait's timeout)."""
    return encoder.process.poll() is not None or (folder.is_dir() and any(folder.iterdir()))


def test_a_wait_counts_a_gap_of_its_own_process_as_little_time(tmp_path, monkeypatch):
    """The wait for an encoder's progress counts the seconds it looked: its own process stopped for longer than
    the bound (Ctrl-Z, then fg: the encoder, in its process group, stopped with it) does not time it out before
    the encoder, continued, can show progress; a wait without progress still times out."""
    import types

    import lerobot_zarr.writing.segments as segments_module
    from lerobot_zarr.errors import EncoderTimeoutError

    clock = iter([0.0, 100.0] + [100.0 + 0.1 * k for k in range(1, 1000)])  # stopped 100 s at the first look
    monkeypatch.setattr(segments_module, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    fake = types.SimpleNamespace(_progress=lambda: (), root=tmp_path, pid=0,
                                 process=types.SimpleNamespace(wait=lambda timeout: None))
    looks = iter(range(100))
    BackgroundEncoder._wait(fake, lambda: next(looks) == 3, 5.0, "a test")  # done at the 4th look: no timeout
    with pytest.raises(EncoderTimeoutError, match="made no progress for 5 s"):
        BackgroundEncoder._wait(fake, lambda: False, 5.0, "a test")


def test_segments_do_not_disturb_verify(tmp_path):
    root = _store(tmp_path / "store")
    encode_missing(root)
    report = LeRobotZarrDataset(root).verify(progress=False)
    assert report.ok, report
    assert len(_segments(root)) == 3


def test_one_frame_depth_episodes_encode_on_their_own(tmp_path):
    """An episode of one frame is encoded on its own: libx265 gives its packet an undefined decoding time, which
    made the mp4 muxer fail at close about one time in five; each of 12 encodes closes and decodes losslessly."""
    from lerobot_zarr.cameras.depth import DEPTH_PIX_FMT
    from lerobot_zarr.cameras.video import VideoWriter

    for k in range(12):
        path = tmp_path / f"{k}.mp4"
        writer = VideoWriter(path, 30, 24, 16, 1, depth=True)
        writer.add(np.full((1, 16, 24, 1), 100 + k, np.uint16))
        writer.close()
        with av.open(str(path)) as c:
            frames = [f.to_ndarray(format=DEPTH_PIX_FMT) for f in c.decode(c.streams.video[0])]
        assert len(frames) == 1 and (frames[0] == 100 + k).all(), k


def test_cameras_encoded_in_parallel_equal_the_single_process_path(tmp_path):
    """encode_in_parallel (finalize's: one camera in this process, each other in a process of its own) makes the
    segments encode_missing makes in one process, decoding to the same frames; run again it makes none."""
    top = "observation.images.top"
    features = {**FEATURES, top: FEATURES[CAM]}
    roots = []
    for name in ("parallel", "single"):
        ds = lerobot_zarr.create(tmp_path / name, fps=30, features=features)
        for e, n in enumerate((6, 4)):
            ds.add_episode({"observation.state": np.zeros((n, 2), np.float32), CAM: _frames(e, n),
                            top: _frames(e + 7, n)}, task="t")
        ds.close()
        roots.append(tmp_path / name)
    encode_in_parallel(roots[0])
    assert encode_missing(roots[1]) == 4
    assert sorted(_segments(roots[0])) == sorted(_segments(roots[1])) and len(_segments(roots[0])) == 4
    for name in _segments(roots[0]):
        frames = []
        for root in roots:
            with av.open(str(root / SEGMENTS / name)) as c:
                frames.append([f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])])
        assert len(frames[0]) in (4, 6) and all(np.array_equal(a, b) for a, b in zip(*frames, strict=True))
    stamps = {p.name: p.stat().st_mtime_ns for p in (roots[0] / SEGMENTS).iterdir()}
    encode_in_parallel(roots[0])
    assert {p.name: p.stat().st_mtime_ns for p in (roots[0] / SEGMENTS).iterdir()} == stamps


def test_the_gate_holds_encoders_back_while_the_recorder_commits(tmp_path):
    """An encoder looks at the recorder's gate before every 8 frames it encodes; a look waits while the recorder holds
    the gate (save_episode's commit), and the recorder does not wait past its patience for an encoder stopped in
    the instant it holds the gate."""
    import fcntl
    import threading

    from lerobot_zarr.writing.segments import Gate, make_segment

    root = _store(tmp_path / "store", lengths=(20,))
    looks: list[int] = []
    ds = LeRobotZarrDataset(root)
    encoding = camera_encodings(ds, [CAM])[CAM]
    assert make_segment(ds, encoding, 0, gate=lambda: looks.append(1)) is not None and len(looks) == 3
    recorder, encoder = Gate(tmp_path / "gate"), Gate(tmp_path / "gate")
    looked = threading.Event()
    with recorder.closed():
        thread = threading.Thread(target=lambda: (encoder.wait(), looked.set()))
        thread.start()
        assert not looked.wait(0.3), "the encoder went on while the recorder held the gate"
    assert looked.wait(60)
    thread.join()
    fcntl.flock(encoder.fd, fcntl.LOCK_SH)  # an encoder stopped while it looks
    started = time.monotonic()
    with recorder.closed(patience=0.05):
        pass
    assert time.monotonic() - started < 30
    recorder.close()
    encoder.close()


def test_frames_the_encoder_refuses_fail_naming_the_camera_and_the_episode(tmp_path):
    """libx265 cannot encode 8x8 depth frames: the export fails with a typed error naming the camera, the episode
    and the codec (it was PyAV's bare ValueError), and the store keeps the episodes."""
    from lerobot_zarr.errors import VideoEncodeError

    depth = "observation.images.depth"
    root = tmp_path / "s"
    ds = lerobot_zarr.create(root, fps=30, features={depth: {"dtype": "video", "shape": [8, 8, 1],
                                                             "info": {"is_depth_map": True}}})
    ds.add_episode({depth: np.full((3, 8, 8, 1), 1000, np.uint16)}, task="t")
    ds.close()
    with pytest.raises(VideoEncodeError, match=rf"camera '{depth}', episode 0: hevc cannot encode its 8x8x1") as err:
        _export(root, tmp_path / "out")
    assert isinstance(err.value, ValueError)
    with LeRobotZarrDataset(root) as back:
        assert back.get_batch([2])[depth].shape[0] == 1


# ------------------------------------------------------------------------ an episode encoded as it is recorded


def _streamed(root: Path, encoder: BackgroundEncoder) -> Path:
    """The temporary file the encoder writes the stream's frames into, once it exists (it is made when the first
    frames read are given to the encoder); the encoder's end is the test's next failure, not a wait's timeout."""
    found: list[Path] = []

    def look() -> bool:
        found[:] = (root / SEGMENTS).glob(f".stream-*.tmp-{encoder.pid}.mp4") if (root / SEGMENTS).is_dir() else []
        return bool(found) or encoder.process.poll() is not None

    _wait_for(look, "the encoder to encode the stream's first frames")
    assert found, f"the encoder ended ({encoder.process.returncode})"
    return found[0]


def _spill(root: Path, frames: np.ndarray) -> Path:
    """A recorder's spill: raw frames from byte 0, in the store's folder."""
    path = root / ".spill.tmp-test"
    path.write_bytes(np.ascontiguousarray(frames).tobytes())
    return path


def _commit_the_rest(ds: WritableDataset, encoder: BackgroundEncoder, path: Path, rest: np.ndarray,
                     frames: np.ndarray) -> int:
    """The rest of the episode lands in the spill at ``path``; the episode (``frames``, as committed) is committed
    and the encoder told so, its reply waited for. Returns the episode's index."""
    with open(path, "ab") as f:
        f.write(np.ascontiguousarray(rest).tobytes())
    index = ds.add_episode({"observation.state": np.zeros((len(frames), 2), np.float32), CAM: frames}, task="t")
    encoder.saved(index)
    assert encoder.flush() is True
    return index


def _plain_export(tmp_path: Path, episodes: list[np.ndarray]) -> list[np.ndarray]:
    """The decoded frames of an export (every episode encoded by it) of a store of ``episodes``."""
    root = lerobot_zarr.create(tmp_path / "plain", fps=30, features=FEATURES).root
    with WritableDataset(root) as ds:
        for frames in episodes:
            ds.add_episode({"observation.state": np.zeros((len(frames), 2), np.float32), CAM: frames}, task="t")
    return _decoded(_export(root, tmp_path / "out_plain"))


@pytest.mark.parametrize("committed", ["the_frames_streamed", "one_frame_changed_after_it_was_encoded"])
def test_an_episode_encoded_as_recorded_is_its_segment_only_with_the_committed_frames(tmp_path, encodes,
                                                                                        committed):
    """The encoder encodes a spill's frames as they come (``stream``), before the episode is committed; once it is
    (``saved``), that file becomes the episode's segment (renamed: the same inode) if it holds the committed frames,
    and the export joins it; a frame changed after it was encoded (the committed hash differs) never lets the
    stream be the segment: the episode is encoded from the store. Either way the export decodes as a plain one."""
    root = _store(tmp_path / "store", lengths=(10,))
    frames = _frames(3, 40)
    with WritableDataset(root) as ds:  # (its opening removes debris: the spill is made after)
        path = _spill(root, frames[:20])  # the frames recorded so far
        encoder = BackgroundEncoder(root, nice=0, settle=None)  # (one file: never completed before it is saved)
        try:
            encoder.stream(CAM, path)
            stream = _streamed(root, encoder)
            os.link(stream, tmp_path / "stream.mp4")  # its inode stays taken: a new file cannot reuse its number
            inode = stream.stat().st_ino
            if committed != "the_frames_streamed":  # the stream's file is there once its first frames are encoded
                frames = frames.copy()
                frames[1] ^= 1
            index = _commit_the_rest(ds, encoder, path, frames[20:], frames)
        finally:
            encoder.close()
            encoder.wait()
    assert encoder.process.returncode == 0
    reader = LeRobotZarrDataset(root)
    segment = find_segment(reader, camera_encodings(reader, [CAM])[CAM], index)
    assert segment is not None and not list((root / SEGMENTS).glob(".*"))
    assert (segment.stat().st_ino == inode) == (committed == "the_frames_streamed")
    out = _export(root, tmp_path / "out")
    assert encodes == []
    want = _plain_export(tmp_path, [_frames(0, 10), frames])
    got = _decoded(out)
    assert len(got) == len(want) == 50 and all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_a_dropped_stream_leaves_nothing_and_the_episode_recorded_instead_is_encoded(tmp_path, encodes):
    """``drop`` (the recorder's clear_episode_buffer) while the encoder encodes a stream: its file is removed at
    once, never a segment; the episode then recorded and committed instead gets the segment of its own frames."""
    root = _store(tmp_path / "store", lengths=(10,))
    other = _frames(4, 12)
    with WritableDataset(root) as ds:
        path = _spill(root, _frames(3, 20))
        encoder = BackgroundEncoder(root, nice=0)
        try:
            encoder.stream(CAM, path)
            stream = _streamed(root, encoder)
            encoder.drop(CAM)
            _wait_for(lambda: not stream.exists() or encoder.process.poll() is not None, "the stream's file removed")
            assert not stream.exists()
            assert encoder.flush() is True and len(_segments(root)) == 1  # episode 0's only
            index = ds.add_episode({"observation.state": np.zeros((12, 2), np.float32), CAM: other}, task="t")
            encoder.saved(index)  # (no stream: the episode is encoded from the store)
            assert encoder.flush() is True
        finally:
            encoder.close()
            encoder.wait()
    assert encoder.process.returncode == 0 and len(_segments(root)) == 2
    assert not list((root / SEGMENTS).glob(".*"))
    out = _export(root, tmp_path / "out")
    assert encodes == []
    want = _plain_export(tmp_path, [_frames(0, 10), other])
    assert all(np.array_equal(a, b) for a, b in zip(_decoded(out), want, strict=True))


def _decodes_to(path: Path, frames: int) -> bool:
    """Whether ``path`` is a complete mp4 of ``frames`` frames (one being written does not open)."""
    try:
        with av.open(str(path)) as c:
            return sum(1 for _ in c.decode(c.streams.video[0])) == frames
    except (av.FFmpegError, OSError):
        return False


def test_a_paused_stream_completes_its_file_and_the_parts_join_as_the_segment(tmp_path, encodes):
    """A stream given no frame for ``settle`` seconds (lerobot-record's reset before save_episode) completes its
    file then (the encoder flushed: nothing left for the save); frames coming after it go to a new part, and the
    episode's segment is the parts joined without encoding: its frames decode in order, each closest to the frame
    recorded at its index, and the export joins it (no episode encoded there)."""
    root = _store(tmp_path / "store", lengths=(10,))
    frames = _frames(3, 30)
    with WritableDataset(root) as ds:
        path = _spill(root, frames[:12])
        encoder = BackgroundEncoder(root, nice=0, settle=0.5)  # (SETTLE_S: frames already in the spill come closer)
        try:
            encoder.stream(CAM, path)
            first = _streamed(root, encoder)
            _wait_for(lambda: _decodes_to(first, 12) or encoder.process.poll() is not None,
                      "the paused stream's file to be completed")
            assert encoder.process.poll() is None
            progress = Path(progress_path(path)).read_bytes()  # frames taken, and given back encoded: all of them
            assert [int.from_bytes(progress[k:k + 8], "little") for k in (0, 8)] == [12, 12]
            index = _commit_the_rest(ds, encoder, path, frames[12:], frames)  # the episode goes on, and is saved
        finally:
            encoder.close()
            encoder.wait()
    assert encoder.process.returncode == 0 and not list((root / SEGMENTS).glob(".*"))
    reader = LeRobotZarrDataset(root)
    encoding = camera_encodings(reader, [CAM])[CAM]
    segment = find_segment(reader, encoding, index)
    assert segment is not None and encoding.valid(segment, 30)
    with av.open(str(segment)) as c:
        got = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]).astype(np.int16)
    errors = np.abs(got[:, None] - frames[None].astype(np.int16)).mean(axis=(2, 3, 4))  # decoded x recorded
    assert got.shape[0] == 30 and (errors.argmin(axis=1) == np.arange(30)).all(), errors.argmin(axis=1)
    out = _export(root, tmp_path / "out")
    assert encodes == [] and len(_decoded(out)) == 40
    whole = np.stack(_plain_export(tmp_path, [_frames(0, 10), frames])[10:]).astype(np.int16)  # encoded in one go
    assert np.abs(got - frames).mean() < 1.25 * np.abs(whole - frames).mean()  # as close as one encoding


def test_a_reply_already_in_the_pipe_is_taken_at_the_first_look(tmp_path, monkeypatch):
    """``flush`` reads the replies the encoder wrote (two at once here) and returns without waiting again: a save
    returns as soon as its videos are made, not at the next look (it was one more 50 ms wait per process)."""
    import select
    import subprocess
    import sys
    import threading
    import types

    import lerobot_zarr.writing.segments as segments_module

    reply = "import sys, time; sys.stdout.write('flushed 0\\nflushed 1\\n'); sys.stdout.flush(); time.sleep(60)"
    encoder = BackgroundEncoder.__new__(BackgroundEncoder)
    encoder.root, encoder.cameras = tmp_path, None
    encoder.process = subprocess.Popen([sys.executable, "-c", reply], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    encoder._replies_due, encoder._replies, encoder._replies_lock = 2, b"", threading.Lock()
    try:
        _wait_for(lambda: select.select([encoder.process.stdout], [], [], 0)[0], "the replies")
        waits: list[float] = []

        def looked(r, w, x, timeout=None):
            if timeout:
                waits.append(timeout)
            return select.select(r, w, x, timeout)

        monkeypatch.setattr(segments_module, "select", types.SimpleNamespace(select=looked))
        monkeypatch.setattr(encoder.process, "wait", lambda timeout=None: waits.append(timeout))
        assert encoder.flush(30, asked=True) is True
        assert waits == [] and encoder._replies_due == 0
    finally:
        encoder.process.kill()
        encoder.process.wait()
        encoder.process.stdout.close()
        encoder.process.stdin.close()


def test_a_camera_the_encoder_cannot_encode_stops_only_that_cameras_work(tmp_path, encodes):
    """One process encodes every camera, a thread each: a camera whose frames its encoder refuses (libx265 and
    8x8 depth frames) stops that camera's work only, said on stderr naming it; the other camera's segments are
    made, the process then exits 1 (the recorder logs that it ended without them all), and an export encodes
    what it lacks (failing there, as without the encoder, with the typed error)."""
    import subprocess

    from lerobot_zarr.errors import VideoEncodeError

    depth = "observation.images.depth"
    root = tmp_path / "s"
    ds = lerobot_zarr.create(root, fps=30, features={**FEATURES, depth: {"dtype": "video", "shape": [8, 8, 1],
                                                                         "info": {"is_depth_map": True}}})
    for e, n in enumerate((6, 5)):
        ds.add_episode({"observation.state": np.zeros((n, 2), np.float32), CAM: _frames(e, n),
                        depth: np.full((n, 8, 8, 1), 1000, np.uint16)}, task="t")
    ds.close()
    encoder = BackgroundEncoder(root, nice=0)  # (its stderr is the test's: what it says is read below, run again)
    encoder.close()
    encoder.wait()
    assert encoder.process.returncode == 1
    reader = LeRobotZarrDataset(root)
    cam = camera_encodings(reader, [CAM])[CAM]
    assert all(find_segment(reader, cam, e) is not None for e in range(2))  # the other camera's, made
    assert not list((root / SEGMENTS).glob(".*"))
    said = subprocess.run([sys.executable, "-m", "lerobot_zarr.writing.encoder_process", str(root), "--no-prune"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(lerobot_zarr.__file__).parents[1])})
    assert said.returncode == 1 and f"camera '{depth}' stopped (VideoEncodeError" in said.stderr, said.stderr
    with pytest.raises(VideoEncodeError, match=rf"camera '{depth}', episode 0"):
        _export(root, tmp_path / "out")
