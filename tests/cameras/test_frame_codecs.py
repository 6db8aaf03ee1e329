"""Per-frame camera codecs: round trips (lossless exact, jpeg within its documented error), the threaded batch
decoder (same pixels, errors, fork, GIL released), the zarr v3 codecs reading hand-written shards (index at the
start and at the end), and the shard layout against the store's own ShardWriter."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from lerobot_zarr.cameras import frame_codecs
from lerobot_zarr.cameras.frame_codecs import (
    CODECS,
    DeltaZstdFrames,
    JpegFrames,
    ZstdFrames,
    codec_from_zarr,
    decode_batch,
    delta_rows,
    frame_codec,
    shard_bytes,
    shard_index,
    undelta_rows,
)
from lerobot_zarr.errors import CorruptStoreError, StoreError, UnsupportedDtypeError, UnsupportedStoreError

G1_VIDEOS = (Path(__file__).parents[2] / ".." / "shared" / "datasets" / "G1-policy-train" / "videos" / "chunk-000"
             / "observation.images.cam_high")
LOSSLESS = ("zstd", "delta-zstd")


def smooth_frames(n: int, shape: tuple[int, int, int], seed: int = 0) -> np.ndarray:
    """Camera-like frames: gradients and blobs that move, plus a little noise."""
    rng = np.random.default_rng(seed)
    h, w, c = shape
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.empty((n, h, w, c), np.uint8)
    for t in range(n):
        base = 90 + 60 * np.sin(x / 17 + t / 5) + 50 * np.cos(y / 11 - t / 7)
        blob = 80 * np.exp(-((x - w * (0.3 + 0.02 * t)) ** 2 + (y - h / 2) ** 2) / (0.02 * h * w))
        for ch in range(c):
            img = base * (0.6 + 0.2 * ch) + blob + rng.normal(0, 2, (h, w))
            out[t, :, :, ch] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def noise_frames(n: int, shape: tuple[int, int, int], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


def have_simplejpeg() -> bool:
    try:
        import simplejpeg  # noqa: F401
    except ImportError:
        return False
    return True


needs_jpeg = pytest.mark.skipif(not have_simplejpeg(), reason="simplejpeg is not installed: jpeg not checked")


# ------------------------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("name", LOSSLESS)
@pytest.mark.parametrize("shape", [(48, 64, 3), (17, 31, 1), (8, 5, 4), (1, 1, 3)])
def test_lossless_round_trip_is_exact(name, shape):
    codec = frame_codec(name, shape)
    assert codec.lossless
    for frames in (smooth_frames(3, shape), noise_frames(3, shape), np.zeros((1, *shape), np.uint8),
                   np.full((1, *shape), 255, np.uint8)):
        for frame in frames:
            data = codec.encode(frame)
            assert isinstance(data, bytes)
            assert np.array_equal(codec.decode(data), frame)


def test_delta_rows_matches_its_definition():
    frame = noise_frames(1, (9, 7, 3))[0]
    want = frame.astype(np.int64)
    want[1:] = want[1:] - frame[:-1].astype(np.int64)
    assert np.array_equal(delta_rows(frame), (want % 256).astype(np.uint8))
    assert np.array_equal(undelta_rows(delta_rows(frame)), frame)
    for axis in (0, 1, 2):  # any axis, as the zarr codec allows
        assert np.array_equal(undelta_rows(delta_rows(frame, axis), axis), frame)


@pytest.mark.parametrize("height", [1, 2, 31, 32, 33, 48, 63, 64, 100, 224, 480, 481])
def test_undelta_inverts_delta_at_every_height(height):
    """The running sum is computed in blocks of ~sqrt(height) rows plus leftover rows: every split is exact."""
    frame = noise_frames(1, (height, 5, 3), seed=height)[0]
    assert np.array_equal(undelta_rows(delta_rows(frame)), frame)
    assert np.array_equal(np.cumsum(delta_rows(frame), axis=0, dtype=np.uint8), frame)  # the plain definition


def test_delta_zstd_is_smaller_than_zstd_on_camera_like_frames():
    frames = smooth_frames(4, (96, 128, 3))
    z, dz = frame_codec("zstd", frames.shape[1:]), frame_codec("delta-zstd", frames.shape[1:])
    assert sum(len(dz.encode(f)) for f in frames) < 0.8 * sum(len(z.encode(f)) for f in frames)


@needs_jpeg
@pytest.mark.parametrize("shape", [(48, 64, 3), (33, 47, 3), (40, 24, 1)])
def test_jpeg_round_trip_within_its_error(shape):
    frames = smooth_frames(3, shape)
    for quality, mean_limit in ((95, 2.0), (90, 2.5), (75, 4.0)):
        codec = frame_codec(f"jpeg:{quality}", shape)
        assert not codec.lossless and codec.quality == quality
        for frame in frames:
            data = codec.encode(frame)
            assert data[:2] == b"\xff\xd8"  # a plain JPEG file
            err = np.abs(codec.decode(data).astype(np.int16) - frame)
            assert err.mean() < mean_limit and err.max() < 64, (quality, err.mean(), err.max())


@needs_jpeg
def test_jpeg_quality_trades_bytes_for_error():
    frames = smooth_frames(2, (64, 96, 3))
    sizes, errors = [], []
    for q in (50, 75, 90, 98):
        codec = frame_codec({"codec": "jpeg", "quality": q}, frames.shape[1:])
        blobs = [codec.encode(f) for f in frames]
        sizes.append(sum(map(len, blobs)))
        errors.append(np.mean([np.abs(codec.decode(b).astype(np.int16) - f).mean() for b, f in zip(blobs, frames)]))
    assert sizes == sorted(sizes) and errors == sorted(errors, reverse=True), (sizes, errors)


@pytest.mark.skipif(not G1_VIDEOS.is_dir(), reason="../shared/datasets/G1-policy-train is absent")
def test_real_g1_frames_round_trip():
    av = pytest.importorskip("av")
    with av.open(str(G1_VIDEOS / "episode_000001.mp4")) as container:
        frames = []
        for k, frame in enumerate(container.decode(video=0)):
            if k % 50 == 0:
                frames.append(frame.to_ndarray(format="rgb24"))
            if len(frames) == 4:
                break
    frames = np.stack(frames)
    sizes = {}
    for name in LOSSLESS:
        codec = frame_codec(name, frames.shape[1:])
        blobs = [codec.encode(f) for f in frames]
        sizes[name] = sum(map(len, blobs))
        assert all(np.array_equal(codec.decode(b), f) for b, f in zip(blobs, frames)), name
    assert sizes["delta-zstd"] < 0.8 * sizes["zstd"] < 0.8 * frames.nbytes, sizes
    if have_simplejpeg():
        codec = frame_codec("jpeg", frames.shape[1:])
        err = np.abs(np.stack([codec.decode(codec.encode(f)) for f in frames]).astype(np.int16) - frames)
        assert err.mean() < 2.0 and err.max() < 64, (err.mean(), err.max())


# ------------------------------------------------------------------------------------------------ specs, errors


def test_specs_and_descriptions():
    shape = (8, 8, 3)
    assert set(CODECS) == {"zstd", "delta-zstd", "jpeg"}
    assert frame_codec("zstd", shape) == ZstdFrames(shape, level=3)
    assert frame_codec("zstd:9", shape) == ZstdFrames(shape, level=9)
    assert frame_codec("delta-zstd", shape).describe() == {"codec": "delta-zstd", "level": 3}
    if have_simplejpeg():
        jpeg = frame_codec("jpeg", shape)
        assert jpeg.describe() == {"codec": "jpeg", "quality": 90, "subsampling": "420"}
        assert frame_codec(jpeg.describe(), shape) == jpeg
    for codec in (ZstdFrames(shape, level=1), DeltaZstdFrames(shape, level=5)):
        assert codec_from_zarr(codec.zarr_codecs(), shape) == codec
        assert frame_codec(codec.describe(), shape) == codec


@pytest.mark.parametrize("bad", ["zip", "jpeg:high", {"codec": "zstd", "speed": 3}, "zstd:99", {"level": 3}])
def test_bad_specs_are_refused(bad):
    with pytest.raises(ValueError):
        frame_codec(bad, (8, 8, 3))


@needs_jpeg
def test_jpeg_options_are_checked():
    for kwargs in ({"quality": 0}, {"quality": 101}, {"quality": 9.5}, {"subsampling": "411"}):
        with pytest.raises(ValueError):
            JpegFrames((8, 8, 3), **kwargs)
    with pytest.raises(ValueError, match="channels"):
        frame_codec("jpeg", (8, 8, 4))


def test_frames_of_another_dtype_or_shape_are_refused():
    codec = frame_codec("zstd", (8, 8, 3))
    with pytest.raises(UnsupportedDtypeError):
        codec.encode(np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ValueError):
        codec.encode(np.zeros((8, 9, 3), np.uint8))


@pytest.mark.parametrize("name", ["zstd", "delta-zstd", "jpeg"])
def test_corrupt_bytes_raise_store_error(name):
    if name == "jpeg" and not have_simplejpeg():
        pytest.skip("simplejpeg is not installed")
    codec = frame_codec(name, (16, 16, 3))
    good = codec.encode(smooth_frames(1, (16, 16, 3))[0])
    other = frame_codec(name, (16, 8, 3)).encode(np.zeros((16, 8, 3), np.uint8))
    for bad in (b"", b"not a frame at all", good[: len(good) // 2], other):
        with pytest.raises(CorruptStoreError):
            codec.decode(bad)


def test_codec_chains_that_we_do_not_write_are_refused():
    for chain in ([{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}],
                  [{"name": "lerobot_zarr.delta", "configuration": {"axis": 2}}, {"name": "bytes"},
                   {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
                  [{"name": "bytes"}, {"name": "zstd"}]):
        with pytest.raises(StoreError) as info:
            codec_from_zarr(chain, (8, 8, 3))
        # a chain of ours without its configuration is malformed; any other is not one this version reads
        assert isinstance(info.value, CorruptStoreError if chain[-1] == {"name": "zstd"} else UnsupportedStoreError)


# ------------------------------------------------------------------------------------------------ batch decoder


def _codecs_for(shape):
    names = [*LOSSLESS, "jpeg"] if have_simplejpeg() else list(LOSSLESS)
    return [frame_codec(n, shape) for n in names]


@pytest.fixture
def parallel_always(monkeypatch):
    """Small test frames go through the thread pool too (by default batches under 1 MiB stay in one thread)."""
    monkeypatch.setattr(frame_codecs, "_PARALLEL_BYTES", 0)


def test_small_batches_stay_in_the_callers_thread(monkeypatch):
    codec = frame_codec("zstd", (8, 8, 3))
    blobs = [codec.encode(f) for f in smooth_frames(4, (8, 8, 3))]
    threads_seen = set()
    decode_into = codec.decode_into

    def spy(data, out):
        threads_seen.add(threading.get_ident())
        decode_into(data, out)

    monkeypatch.setattr(codec, "decode_into", spy)
    decode_batch(codec, blobs, np.empty((4, 8, 8, 3), np.uint8), threads=4)
    assert threads_seen == {threading.get_ident()}
    monkeypatch.setattr(frame_codecs, "_PARALLEL_BYTES", 0)
    decode_batch(codec, blobs, np.empty((4, 8, 8, 3), np.uint8), threads=4)
    assert len(threads_seen) > 1


@pytest.mark.usefixtures("parallel_always")
def test_decode_batch_equals_one_by_one_and_takes_buffers():
    frames = smooth_frames(7, (24, 40, 3))
    for codec in _codecs_for(frames.shape[1:]):
        blobs = [codec.encode(f) for f in frames]
        want = np.stack([codec.decode(b) for b in blobs])
        packed = b"".join(blobs)
        offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])])
        views = [memoryview(packed)[offsets[k]:offsets[k + 1]] for k in range(len(blobs))]  # as from a mapped shard
        for threads in (1, 2, 3, 8):
            out = np.empty_like(frames)
            assert decode_batch(codec, views, out, threads=threads) is out
            assert np.array_equal(out, want), (codec, threads)
        if codec.lossless:
            assert np.array_equal(want, frames)


@pytest.mark.usefixtures("parallel_always")
def test_decode_batch_errors_name_the_frame_and_check_out():
    codec = frame_codec("delta-zstd", (8, 8, 3))
    blobs = [codec.encode(f) for f in smooth_frames(4, (8, 8, 3))]
    blobs[2] = b"garbage"
    with pytest.raises(CorruptStoreError, match="episode 7 row 2"):
        decode_batch(codec, blobs, np.empty((4, 8, 8, 3), np.uint8), threads=2, where=lambda k: f"episode 7 row {k}")
    for out in (np.empty((3, 8, 8, 3), np.uint8), np.empty((4, 8, 8, 3), np.int16),
                np.empty((4, 8, 8, 6), np.uint8)[..., :3]):
        with pytest.raises(ValueError):
            decode_batch(codec, blobs, out)


def _decode_in_child(conn, blobs, shape):
    try:
        codec = frame_codec("delta-zstd", shape)
        out = np.empty((len(blobs), *shape), np.uint8)
        decode_batch(codec, blobs, out, threads=2)
        conn.send(out)
    except BaseException as exc:
        conn.send(repr(exc))
    conn.close()


@pytest.mark.usefixtures("parallel_always")
@pytest.mark.filterwarnings("ignore:This process")
def test_decode_batch_after_fork():
    shape = (16, 24, 3)
    frames = smooth_frames(6, shape)
    codec = frame_codec("delta-zstd", shape)
    blobs = [codec.encode(f) for f in frames]
    decode_batch(codec, blobs, np.empty_like(frames), threads=2)  # the parent's pool exists
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_decode_in_child, args=(child, blobs, shape))
    proc.start()
    assert parent.poll(60), "the forked child did not answer (a pool inherited from the parent hangs)"
    got = parent.recv()
    proc.join(10)
    assert not isinstance(got, str), got
    assert np.array_equal(got, frames)


def _releases_gil(work, seconds: float) -> bool:
    """Whether the main thread runs while a worker thread repeats ``work()`` (for ``seconds``, or until the main
    thread ran): with a switch interval of 10 s, a worker that holds the GIL keeps it until it ends, so the main
    thread only runs once the worker is done. However late a loaded machine wakes the main thread, a releasing
    worker is still working then (it stops only when the main thread ran, or after ``seconds``)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    inside, done, ran = threading.Event(), threading.Event(), threading.Event()
    try:
        def worker() -> None:
            deadline = time.perf_counter() + seconds
            inside.set()
            while not ran.is_set() and time.perf_counter() < deadline:
                work()
            done.set()

        thread = threading.Thread(target=worker)
        thread.start()
        assert inside.wait(60), "the worker thread did not start"
        ran_first = not done.is_set()
        ran.set()
        thread.join()
    finally:
        sys.setswitchinterval(old)
    return ran_first


def test_gil_check_detects_a_holder():
    def python_loop() -> None:
        deadline = time.perf_counter() + 0.05
        while time.perf_counter() < deadline:
            pass

    assert not _releases_gil(python_loop, 0.1)


@pytest.mark.parametrize("name", ["zstd", "delta-zstd", "jpeg"])
def test_decoders_release_the_gil(name):
    """A batch decodes in parallel only if the codec lets go of the GIL while it works."""
    if name == "jpeg" and not have_simplejpeg():
        pytest.skip("simplejpeg is not installed")
    shape = (1024, 1024, 3)
    frame = np.ascontiguousarray(np.tile(smooth_frames(1, (256, 256, 3))[0], (4, 4, 1)))
    codec = frame_codec(name, shape)
    data = codec.encode(frame)
    out = np.empty(shape, np.uint8)
    codec.decode_into(data, out)
    assert _releases_gil(lambda: codec.decode_into(data, out), 30.0)


# ------------------------------------------------------------------------------------------------ zarr


def _array_json(n: int, shape: tuple[int, int, int], codecs: list, index_location: str) -> dict:
    return {"shape": [n, *shape], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [n, *shape]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "fill_value": 0,
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [1, *shape], "codecs": codecs,
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": index_location}}],
            "attributes": {}, "dimension_names": ["frame", "h", "w", "c"], "zarr_format": 3, "node_type": "array"}


@pytest.mark.parametrize("index_location", ["end", "start"])
def test_zarr_reads_hand_written_shards(tmp_path, index_location):
    zarr = pytest.importorskip("zarr")
    import lerobot_zarr  # noqa: F401  (registers the codecs)

    shape = (24, 32, 3)
    frames = smooth_frames(5, shape)
    for codec in _codecs_for(shape):
        blobs = [codec.encode(f) for f in frames]
        root = tmp_path / f"{codec.name}-{index_location}"
        (root / "c" / "0" / "0" / "0").mkdir(parents=True)
        (root / "zarr.json").write_text(json.dumps(_array_json(5, shape, codec.zarr_codecs(), index_location)))
        (root / "c" / "0" / "0" / "0" / "0").write_bytes(shard_bytes(blobs, index_location=index_location))
        arr = zarr.open_array(str(root), mode="r")
        want = decode_batch(codec, blobs, np.empty_like(frames))
        assert np.array_equal(arr[:], want), codec
        assert np.array_equal(arr[3], want[3]) and np.array_equal(arr[1:3, 5:9], want[1:3, 5:9])


def test_zarr_reads_a_shard_with_an_absent_frame(tmp_path):
    zarr = pytest.importorskip("zarr")
    import lerobot_zarr  # noqa: F401

    shape = (8, 8, 3)
    frames = smooth_frames(3, shape)
    codec = frame_codec("delta-zstd", shape)
    blobs = [codec.encode(f) for f in frames]
    none = 2**64 - 1
    body = blobs[0] + blobs[2]
    index = shard_index([0, none, len(blobs[0])], [len(blobs[0]), none, len(blobs[2])])
    (tmp_path / "c" / "0" / "0" / "0").mkdir(parents=True)
    (tmp_path / "zarr.json").write_text(json.dumps(_array_json(3, shape, codec.zarr_codecs(), "end")))
    (tmp_path / "c" / "0" / "0" / "0" / "0").write_bytes(body + index)
    got = zarr.open_array(str(tmp_path), mode="r")[:]
    assert np.array_equal(got[0], frames[0]) and np.array_equal(got[2], frames[2]) and not got[1].any()


def test_zarr_writes_with_our_codecs_and_we_read_its_shards(tmp_path):
    zarr = pytest.importorskip("zarr")
    from zarr.registry import get_codec_class

    import lerobot_zarr  # noqa: F401

    shape = (16, 20, 3)
    frames = smooth_frames(4, shape)
    for codec in _codecs_for(shape):
        chain = [get_codec_class(c["name"]).from_dict(c) for c in codec.zarr_codecs()]
        names = [c["name"] for c in codec.zarr_codecs()]
        k = names.index("bytes") if "bytes" in names else names.index("lerobot_zarr.jpeg")
        arr = zarr.create_array(str(tmp_path / codec.name), shape=frames.shape, dtype="uint8", chunks=(1, *shape),
                                shards=frames.shape, filters=chain[:k], serializer=chain[k],
                                compressors=chain[k + 1:])
        arr[:] = frames
        data = (tmp_path / codec.name / "c" / "0" / "0" / "0" / "0").read_bytes()
        index = np.frombuffer(data[-(16 * 4 + 4):-4], "<u8").reshape(4, 2)
        for k in range(4):
            got = codec.decode(data[index[k, 0]:index[k, 0] + index[k, 1]])
            if codec.lossless:
                assert np.array_equal(got, frames[k])
            else:
                assert np.array_equal(got, arr[k])


def test_codecs_register_whatever_the_import_order():
    """zarr finds the codecs through the package's ``zarr.codecs`` entry points: whatever was imported first, and
    with lerobot_zarr never imported; no import hook is installed."""
    code = ("import sys; {first}; {second}; from zarr.registry import get_codec_class; "
            "print(get_codec_class('lerobot_zarr.delta').__name__, get_codec_class('lerobot_zarr.jpeg').__name__, "
            "[type(f).__module__ for f in sys.meta_path if type(f).__module__.startswith('lerobot_zarr')])")
    orders = (("import lerobot_zarr", "import zarr"), ("import zarr", "import lerobot_zarr"),
              ("import lerobot_zarr", "import xarray"), ("import zarr", "pass"))
    procs = [subprocess.Popen([sys.executable, "-c", code.format(first=first, second=second)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=str(Path(__file__).parents[2]),
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
             for first, second in orders]  # fresh interpreters, run side by side
    try:
        for (first, second), proc in zip(orders, procs, strict=True):
            stdout, stderr = proc.communicate(timeout=120)
            assert proc.returncode == 0 and stdout.split() == ["DeltaCodec", "JpegCodec", "[]"], \
                (first, second, stdout, stderr)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------------ shard layout


def test_shard_bytes_equal_the_store_pack_writer(tmp_path):
    """A compact pack with one episode filling it is byte for byte ``shard_bytes(..., index_location="start")``
    of the codec's frames: what the store writes is a plain zarr shard."""
    from lerobot_zarr.store.packs import ensure_pack, read_shard_index, write_rows
    from lerobot_zarr.store.state import chunk_path
    from lerobot_zarr.store.tables import ArraySpec

    shape = (12, 16, 3)
    frames = noise_frames(5, shape)
    for spec_text in ("zstd", "delta-zstd"):
        codec = frame_codec(spec_text, shape)
        spec = ArraySpec(np.dtype(np.uint8), shape, ("height", "width", "channels"), "image", "compact",
                         codec=tuple(codec.describe().items()))
        root = tmp_path / spec_text
        ensure_pack(root, {"cam": spec}, 0, len(frames))
        write_rows(root, "cam", spec, 0, 0, frames, len(frames))
        path = Path(chunk_path(root, "cam", 0, 4))
        assert shard_bytes([codec.encode(f) for f in frames], index_location="start") == path.read_bytes()
        fd = os.open(path, os.O_RDONLY)
        try:
            index = read_shard_index(fd, spec, len(frames), 0, len(frames), str(path))
        finally:
            os.close(fd)
        data = path.read_bytes()
        assert all(np.array_equal(codec.decode(data[o:o + n]), f) for (o, n), f in zip(index.tolist(), frames))


def test_shard_index_at_the_start_points_past_itself():
    blobs = [b"abc", b"", b"defgh"]
    data = shard_bytes(blobs, index_location="start")
    head = 16 * 3 + 4
    index = np.frombuffer(data[:head - 4], "<u8").reshape(3, 2)
    assert index.tolist() == [[head, 3], [head + 3, 0], [head + 3, 5]]
    assert [data[o:o + n] for o, n in index.tolist()] == blobs
    with pytest.raises(ValueError):
        shard_bytes(blobs, index_location="middle")


# ------------------------------------------------------------------------------------------------ float32 CHW


def test_float32_chw_is_torchs_division_in_any_layout():
    """``to_float32_chw`` is ``u8.float() / 255`` with the channel axis moved before height and width: for one
    frame, windows of a batch, and into a caller's array across the chunks it converts at a time."""
    from lerobot_zarr.cameras.images import to_float32_chw

    rng = np.random.default_rng(0)
    for shape in ((6, 5, 3), (37, 6, 5, 1), (4, 3, 6, 5, 3)):
        frames = rng.integers(0, 256, shape, dtype=np.uint8)
        want = np.moveaxis(frames.astype(np.float32) / np.float32(255), -1, -3)
        got = to_float32_chw(frames)
        assert got.dtype == np.float32 and got.shape == want.shape and np.array_equal(got, want)
        out = np.full(want.shape, np.nan, dtype=np.float32)
        assert to_float32_chw(frames, out) is out and np.array_equal(out, want)
