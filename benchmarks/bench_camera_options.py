"""Camera storage options between raw frames and the mp4, measured on real video (a prototype of the store's
options, working on arrays and files directly, not through the store).

Cameras: G1-policy-train's real AV1 camera (``../shared/datasets/G1-policy-train``, the 4 episodes whose mp4
files exist, 480x640, LeRobot's AV1 with a keyframe every 2 frames), and a larger synthetic one (camera-like
moving scenes encoded with LeRobot's AV1 settings by ``lerobot_zarr.cameras.video.VideoWriter``; ``--synthetic-episodes``).
The reference frames are PyAV's decode of the mp4 (``lerobot_zarr.cameras.video.decode_into``): what ``raw`` stores.

Part 1, codec survey (``--survey``, default on): candidate per-frame codecs on a sample of the reference frames:
bytes per frame relative to the mp4's, encode and decode µs per frame (one thread), max/mean abs pixel error.

Part 2, the options table. Each option stores the camera one way and samples 2-frame windows ``[i - 1, i]``
(clamped at the episode start, as LeRobot pads), on the same seeded random indices:

- ``raw``: every frame uncompressed in one file, read with ``np.memmap`` (today's store);
- ``zstd`` (today's ``compact``), ``delta-zstd`` (lossless default), ``jpeg q90`` (lossy default), ``jpeg q80``:
  every frame encoded with ``lerobot_zarr.frame_codecs``, back to back in one file with an offset index (as a
  pack's shard), read through ``mmap`` and decoded with ``frame_codecs.decode_batch`` (thread pool);
- ``mp4``: the mp4 files kept, frames decoded on read by ``lerobot_zarr.cameras.video_reader.Mp4Frames``;
- each again with the frames resized to 224x224 at "transcode" (``lerobot_zarr.cameras.resize``, bilinear antialiased);
  the ``mp4`` row resizes after decoding, on read.

Columns: disk bytes / the mp4's bytes; ``ds[i]``: samples/s one window at a time; ``batch``: samples/s in batches
of 64 windows; ratios to LeRobot's per-sample decode timed among the same contenders (open the file, seek to the first
timestamp, decode to the last, convert the chosen frames to rgb24, close; one decoder thread, as
``benchmarks/bench_video.py`` emulates it; for the 224x224 rows it also resizes the two frames, as a training
transform would); max/mean abs pixel error against PyAV's decode (224 rows: against the resize of PyAV's decode).
Contenders run interleaved, block by block (the order rotating), so that noise from other tenants hits all alike;
medians over ``--repeats``.

Run:  .venv/bin/python benchmarks/bench_camera_options.py [--quick] [--synthetic-episodes 6] [--no-survey]
"""

from __future__ import annotations

import argparse
import io
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common as C  # noqa: E402

from lerobot_zarr.cameras.resize import resize_frame, resize_frames
from lerobot_zarr.cameras.video import TOLERANCE_S, VideoWriter, decode_into
from lerobot_zarr.cameras.video_reader import Mp4Frames
from lerobot_zarr.frame_codecs import decode_batch, decode_threads, frame_codec

G1 = ROOT / ".." / "shared" / "datasets" / "G1-policy-train"
G1_CAMERA = "observation.images.cam_high"
FPS = 30
SHAPE = (480, 640, 3)
SMALL = (224, 224)
BATCH = 64
BLOCK = 25


# ------------------------------------------------------------------------------------------------ cameras
@dataclass
class Camera:
    """One camera: its episodes' mp4 files and the reference frames (PyAV's decode) in one raw file."""

    name: str
    files: list[str]
    from_ts: np.ndarray
    lengths: np.ndarray
    raw_path: Path
    start: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.start = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)

    @property
    def n(self) -> int:
        return int(self.lengths.sum())

    @property
    def mp4_bytes(self) -> int:
        return sum(os.path.getsize(f) for f in set(self.files))

    def frames(self) -> np.ndarray:
        return np.memmap(self.raw_path, dtype=np.uint8, mode="r", shape=(self.n, *SHAPE))

    def window_rows(self, i: int) -> np.ndarray:
        """Global rows of frame i's window [i - 1, i], clamped to its episode."""
        e = int(np.searchsorted(self.start, i, side="right")) - 1
        return np.maximum(np.array([i - 1, i]), self.start[e])

    def query(self, rows: np.ndarray) -> tuple[list[str], np.ndarray]:
        """(file, timestamp in the file) of global rows."""
        e = np.searchsorted(self.start, rows, side="right") - 1
        return [self.files[k] for k in e.tolist()], self.from_ts[e] + (rows - self.start[e]) / FPS


def decode_reference(name: str, files: list[str], from_ts: list[float], lengths: list[int], work: Path) -> Camera:
    raw = work / f"{name}.raw"
    cam = Camera(name, files, np.asarray(from_ts, np.float64), np.asarray(lengths, np.int64), raw)
    if raw.exists() and raw.stat().st_size == cam.n * int(np.prod(SHAPE)):
        return cam
    with open(raw, "wb") as sink:
        for f, t0, n in zip(files, from_ts, lengths):
            decode_into(f, sink.write, t0 + np.arange(n) / FPS, SHAPE, f)
    return cam


def g1_camera(work: Path) -> Camera | None:
    folder = G1 / "videos" / "chunk-000" / G1_CAMERA
    if not folder.is_dir():
        return None
    import json

    lengths = {r["episode_index"]: r["length"] for r in map(json.loads, (G1 / "meta" / "episodes.jsonl").open())}
    files = sorted(folder.glob("episode_*.mp4"))
    eps = [int(f.stem.split("_")[1]) for f in files]
    return decode_reference("G1", [str(f) for f in files], [0.0] * len(files), [lengths[e] for e in eps], work)


def synthetic_camera(work: Path, episodes: int, length: int, seed: int) -> Camera:
    path = work / f"synthetic-{episodes}x{length}-{seed}.mp4"
    spans_path = path.with_suffix(".spans.npy")
    if not (path.exists() and spans_path.exists()):
        os.environ.setdefault("SVT_LOG", "1")
        writer = VideoWriter(path, FPS, SHAPE[1], SHAPE[0])
        spans = [writer.add(C.scene_frames(np.random.default_rng([seed, e]), length, SHAPE))[0]
                 for e in range(episodes)]
        writer.close()
        np.save(spans_path, np.asarray(spans))
    spans = np.load(spans_path)
    return decode_reference(f"synthetic-{episodes}x{length}", [str(path)] * episodes, spans.tolist(),
                            [length] * episodes, work)


# ------------------------------------------------------------------------------------------------ part 1: survey
def survey_candidates() -> dict[str, tuple[Callable, Callable]]:
    """name -> (encode(frame) -> bytes, decode(bytes) -> frame). Only what is installed here."""
    from numcodecs import LZ4, Zstd
    from PIL import Image, features

    def pil(fmt: str, **kw):
        def enc(x):
            bio = io.BytesIO()
            Image.fromarray(x).save(bio, fmt, **kw)
            return bio.getvalue()
        return enc, lambda b: np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))

    def fc(spec):
        c = frame_codec(spec, SHAPE)
        return c.encode, c.decode

    out = {f"zstd level {k}": (lambda x, k=k: bytes(Zstd(k).encode(x)),
                               lambda b: np.frombuffer(Zstd().decode(b), np.uint8).reshape(SHAPE))
           for k in (1, 3, 9)}
    out["lz4"] = (lambda x: bytes(LZ4().encode(x)), lambda b: np.frombuffer(LZ4().decode(b), np.uint8).reshape(SHAPE))
    out["delta-zstd level 1"] = fc("delta-zstd:1")
    out["delta-zstd level 3 (default)"] = fc("delta-zstd")
    out["PNG (Pillow, level 1)"] = pil("PNG", compress_level=1)
    out["PNG (Pillow, level 6)"] = pil("PNG", compress_level=6)
    if features.check("webp"):
        out["WebP lossless (Pillow, method 0)"] = pil("WEBP", lossless=True, method=0)
    try:
        import imagecodecs as ic

        out["JPEG-LS (imagecodecs)"] = (ic.jpegls_encode, ic.jpegls_decode)
        out["JPEG-XL lossless effort 1 (imagecodecs)"] = (lambda x: ic.jpegxl_encode(x, lossless=True, effort=1),
                                                          ic.jpegxl_decode)
        out["QOI (imagecodecs)"] = (ic.qoi_encode, ic.qoi_decode)
    except ImportError:
        pass
    try:
        import simplejpeg  # noqa: F401

        for q in (75, 80, 85, 90, 95):
            out[f"JPEG q{q} 4:2:0 (simplejpeg){' (default)' if q == 90 else ''}"] = fc(f"jpeg:{q}")
        out["JPEG q90 4:4:4 (simplejpeg)"] = fc({"codec": "jpeg", "quality": 90, "subsampling": "444"})
    except ImportError:
        pass
    out["JPEG q90 (Pillow)"] = pil("JPEG", quality=90)
    if features.check("webp"):
        for q in (75, 90):
            out[f"WebP q{q} (Pillow, method 0)"] = pil("WEBP", quality=q, method=0)
    if features.check("avif"):
        out["AVIF q80 speed 10 (Pillow)"] = pil("AVIF", quality=80, speed=10)
    try:
        import imagecodecs as ic

        out["JPEG-XL distance 1 effort 1 (imagecodecs)"] = (
            lambda x: ic.jpegxl_encode(x, distance=1.0, effort=1), ic.jpegxl_decode)
    except ImportError:
        pass
    return out


def survey(cam: Camera, n: int) -> None:
    frames = cam.frames()
    pick = np.linspace(0, cam.n - 1, n).astype(int)
    sample = [np.ascontiguousarray(frames[k]) for k in pick]
    per_mp4 = cam.mp4_bytes / cam.n
    print(f"\n## Codec survey, {cam.name}: {n} frames spread over {cam.n}; mp4 {per_mp4:,.0f} B/frame, raw "
          f"{np.prod(SHAPE):,} B/frame; one thread\n")
    print("| codec | bytes/frame | x mp4 | raw / this | encode µs | decode µs | max err | mean err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, (enc, dec) in survey_candidates().items():
        try:
            t0 = time.perf_counter()
            blobs = [enc(f) for f in sample]
            t1 = time.perf_counter()
            back = [np.asarray(dec(b)).reshape(SHAPE) for b in blobs]
            t2 = time.perf_counter()
        except Exception as exc:
            print(f"| {name} | failed: {type(exc).__name__}: {exc} | | | | | | |")
            continue
        err = np.abs(np.stack(back).astype(np.int16) - np.stack(sample))
        size = np.mean([len(b) for b in blobs])
        print(f"| {name} | {size:,.0f} | {size / per_mp4:.2f} | {np.prod(SHAPE) / size:.1f} | "
              f"{(t1 - t0) / n * 1e6:,.0f} | {(t2 - t1) / n * 1e6:,.0f} | {err.max()} | {err.mean():.3f} |",
              flush=True)


# ------------------------------------------------------------------------------------------------ part 2: options
class Option:
    """One storage of the camera: its disk bytes, a per-window read and a batch read, its reference."""

    name: str
    disk: int
    resized: bool

    def window(self, rows: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def batch(self, rows: np.ndarray) -> np.ndarray:  # rows: (B, 2)
        raise NotImplementedError

    def close(self) -> None:
        pass


class RawOption(Option):
    def __init__(self, name: str, path: Path, shape: tuple[int, int, int], n: int):
        self.name, self.resized = name, shape != SHAPE
        self.mm = np.memmap(path, dtype=np.uint8, mode="r", shape=(n, *shape))
        self.disk = os.path.getsize(path)

    def window(self, rows: np.ndarray) -> np.ndarray:
        return self.mm[rows]

    def batch(self, rows: np.ndarray) -> np.ndarray:
        return self.mm[rows.reshape(-1)].reshape(*rows.shape, *self.mm.shape[1:])


class CodecOption(Option):
    """Frames encoded back to back in one file, an offset index beside it (as in a pack's shard)."""

    def __init__(self, name: str, spec: str, frames: np.ndarray, path: Path):
        self.name, self.resized = name, frames.shape[1:] != SHAPE
        self.codec = frame_codec(spec, frames.shape[1:])
        if not path.exists():
            with ThreadPoolExecutor(decode_threads()) as pool:
                blobs = list(pool.map(lambda k: self.codec.encode(np.ascontiguousarray(frames[k])),
                                      range(len(frames)), chunksize=16))
            offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
            np.save(path.with_suffix(".index.npy"), offsets)
            path.write_bytes(b"".join(blobs))
        self.offsets = np.load(path.with_suffix(".index.npy"))
        self.file = open(path, "rb")
        self.map = mmap.mmap(self.file.fileno(), 0, access=mmap.ACCESS_READ)
        self.view = memoryview(self.map)
        self.disk = os.path.getsize(path) + 16 * len(frames)  # the shard index: (offset, nbytes) per frame

    def blobs(self, rows: np.ndarray) -> list[memoryview]:
        o = self.offsets
        return [self.view[o[r]:o[r + 1]] for r in rows.tolist()]

    def window(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((len(rows), *self.codec.frame_shape), np.uint8)
        return decode_batch(self.codec, self.blobs(rows), out)

    def batch(self, rows: np.ndarray) -> np.ndarray:
        flat = rows.reshape(-1)
        out = np.empty((len(flat), *self.codec.frame_shape), np.uint8)
        decode_batch(self.codec, self.blobs(flat), out)
        return out.reshape(*rows.shape, *self.codec.frame_shape)

    def close(self) -> None:
        self.view.release()
        self.map.close()
        self.file.close()


class Mp4Option(Option):
    def __init__(self, name: str, cam: Camera, size: tuple[int, int] | None):
        self.name, self.cam, self.size, self.resized = name, cam, size, size is not None
        self.reader = Mp4Frames(SHAPE)
        self.disk = cam.mp4_bytes

    def _resize(self, frames: np.ndarray) -> np.ndarray:
        return frames if self.size is None else resize_frames(frames, self.size)

    def window(self, rows: np.ndarray) -> np.ndarray:
        files, times = self.cam.query(rows)
        return self._resize(self.reader.read(files[0], times))

    def batch(self, rows: np.ndarray) -> np.ndarray:
        files, times = self.cam.query(rows.reshape(-1))
        frames = self._resize(self.reader.read_many(files, times))
        return frames.reshape(*rows.shape, *frames.shape[1:])

    def close(self) -> None:
        self.reader.close()


class LeRobotPerSample:
    """LeRobot's per-sample decode (pyav backend): open, seek to the first timestamp (backward, keyframe),
    decode to the last, nearest frame per timestamp (1e-4 s), rgb24 of the chosen frames, close; optionally
    resized afterwards (a training transform)."""

    def __init__(self, cam: Camera, size: tuple[int, int] | None = None):
        self.cam, self.size = cam, size

    def window(self, rows: np.ndarray) -> np.ndarray:
        import av

        files, times = self.cam.query(rows)
        with av.open(files[0]) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            first, last = float(times.min()), float(times.max())
            container.seek(round(first / stream.time_base), backward=True, any_frame=False, stream=stream)
            got, at = [], []
            for frame in container.decode(stream):
                got.append(frame)
                at.append(float(frame.time))
                if at[-1] >= last - TOLERANCE_S:
                    break
            dist = np.abs(times[:, None] - np.asarray(at)[None, :])
            nearest = dist.argmin(axis=1)
            frames = np.stack([got[j].to_ndarray(format="rgb24") for j in nearest.tolist()])
        if self.size is not None:
            frames = np.stack([resize_frame(f, self.size) for f in frames])
        return frames


def timed_blocks(fns: dict[str, Callable[[list], None]], blocks: list[list], repeats: int) -> dict[str, float]:
    """Median over repeats of the seconds each contender takes for all blocks, contenders interleaved block by
    block with a rotating order."""
    names = list(fns)
    totals = {k: [0.0] * repeats for k in names}
    for r in range(repeats):
        for b, block in enumerate(blocks):
            for name in names[b % len(names):] + names[:b % len(names)]:
                t0 = time.perf_counter()
                fns[name](block)
                totals[name][r] += time.perf_counter() - t0
    return {k: statistics.median(v) for k, v in totals.items()}


def build_options(cam: Camera, work: Path, jpeg_qualities: tuple[int, ...]) -> tuple[list[Option], np.ndarray]:
    frames = cam.frames()
    small_path = work / f"{cam.name}-224.raw"
    if not small_path.exists():
        small = np.lib.format.open_memmap(work / "tmp-224.npy", mode="w+", dtype=np.uint8, shape=(cam.n, *SMALL, 3))
        step = 256
        for lo in range(0, cam.n, step):
            small[lo:lo + step] = resize_frames(np.asarray(frames[lo:lo + step]), SMALL)
        small.flush()
        with open(small_path, "wb") as f:
            f.write(np.asarray(small).tobytes())
        del small
        os.unlink(work / "tmp-224.npy")
    small = np.memmap(small_path, dtype=np.uint8, mode="r", shape=(cam.n, *SMALL, 3))
    options: list[Option] = [RawOption("raw", cam.raw_path, SHAPE, cam.n)]
    specs = [("zstd (today's compact)", "zstd"), ("delta-zstd (lossless default)", "delta-zstd")]
    specs += [(f"jpeg q{q}{' (lossy default)' if q == 90 else ''}", f"jpeg:{q}") for q in jpeg_qualities]
    for label, spec in specs:
        options.append(CodecOption(label, spec, frames, work / f"{cam.name}-{spec.replace(':', '')}.bin"))
    options.append(Mp4Option("mp4 kept (Mp4Frames)", cam, None))
    options.append(RawOption("raw 224x224", small_path, (*SMALL, 3), cam.n))
    for label, spec in specs:
        options.append(CodecOption(f"{label.split(' (')[0]} 224x224", spec, small,
                                   work / f"{cam.name}-224-{spec.replace(':', '')}.bin"))
    options.append(Mp4Option("mp4 kept, resized on read 224x224", cam, SMALL))
    return options, small


def run_options(cam: Camera, work: Path, samples: int, batches: int, repeats: int, seed: int,
                jpeg_qualities: tuple[int, ...], check: int) -> None:
    options, small = build_options(cam, work, jpeg_qualities)
    frames = cam.frames()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, cam.n, samples)
    windows = [cam.window_rows(int(i)) for i in idx]
    blocks = [windows[k:k + BLOCK] for k in range(0, len(windows), BLOCK)]
    batch_rows = [np.stack([cam.window_rows(int(i)) for i in rng.integers(0, cam.n, BATCH)]) for _ in range(batches)]
    lerobot, lerobot_small = LeRobotPerSample(cam), LeRobotPerSample(cam, SMALL)

    # correctness first: every option's windows against the reference (exact for lossless, error otherwise)
    errors: dict[str, tuple[int, float]] = {}
    check_rows = np.concatenate([windows[k] for k in range(min(check, len(windows)))] + [cam.start, cam.start + 1])
    check_rows = np.minimum(check_rows, cam.n - 1)
    for opt in options:
        want = (small if opt.resized else frames)[check_rows]
        got = np.concatenate([opt.window(cam.window_rows(int(r)))[1:] for r in check_rows])
        err = np.abs(got.astype(np.int16) - want)
        errors[opt.name] = (int(err.max()), float(err.mean()))
        if "jpeg" not in opt.name and err.max() != 0:
            raise AssertionError(f"{opt.name}: a lossless option differs from PyAV's decode (max {err.max()})")
    for ref, want in ((lerobot, frames), (lerobot_small, small)):
        got = np.stack([ref.window(w) for w in windows[:8]])
        if not np.array_equal(got, np.stack([want[w] for w in windows[:8]])):
            raise AssertionError("the per-sample baseline differs from the reference frames")

    # full-frame error of lossy options over every frame (a sample of frames above only)
    for opt in options:
        if isinstance(opt, CodecOption) and not opt.codec.lossless:
            want = small if opt.resized else frames
            worst, total = 0, 0.0
            for lo in range(0, cam.n, 128):
                rows = np.arange(lo, min(cam.n, lo + 128))
                got = opt.batch(rows[:, None])[:, 0]
                err = np.abs(got.astype(np.int16) - want[rows])
                worst, total = max(worst, int(err.max())), total + float(err.sum())
            errors[opt.name] = (worst, total / (cam.n * np.prod(want.shape[1:])))

    def single(opt) -> Callable[[list], None]:
        return lambda block: [opt.window(w) for w in block]

    def batched(opt) -> Callable[[list], None]:
        return lambda block: [opt.batch(rows) for rows in block]

    def per_sample_batch(ref) -> Callable[[list], None]:  # LeRobot has no batch path: a window at a time
        return lambda block: [[ref.window(w) for w in rows] for rows in block]

    contenders = {"lerobot": single(lerobot), "lerobot 224": single(lerobot_small)}
    contenders.update({opt.name: single(opt) for opt in options})
    per_sample = timed_blocks(contenders, blocks, repeats)
    batch_contenders = {"lerobot": per_sample_batch(lerobot), "lerobot 224": per_sample_batch(lerobot_small)}
    batch_contenders.update({opt.name: batched(opt) for opt in options})
    batch_blocks = [[rows] for rows in batch_rows]
    per_batch = timed_blocks(batch_contenders, batch_blocks, repeats)

    base = per_sample["lerobot"] / samples
    base_small = per_sample["lerobot 224"] / samples
    base_b = per_batch["lerobot"] / (batches * BATCH)  # the same baseline, timed among the batch contenders
    base_b_small = per_batch["lerobot 224"] / (batches * BATCH)
    mp4 = cam.mp4_bytes
    print(f"\n## Options, {cam.name}: {len(cam.files)} mp4 file(s), {cam.n:,} frames 480x640x3, mp4 {mp4 / 1e6:.1f} MB; "
          f"{samples} random 2-frame windows one at a time, {batches} batches of {BATCH}; decode threads "
          f"{decode_threads()}; medians of {repeats}\n")
    print(f"LeRobot per-sample decode: {base * 1e3:.2f} ms per window ({1 / base:,.0f} samples/s); with a resize "
          f"to 224x224: {base_small * 1e3:.2f} ms\n")
    print("| option | disk / mp4 | ds[i] samples/s | x LeRobot | batch(64) samples/s | x LeRobot | max err | mean err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for opt in options:
        ref, ref_b = (base_small, base_b_small) if opt.resized else (base, base_b)
        one = per_sample[opt.name] / samples
        bat = per_batch[opt.name] / (batches * BATCH)
        e_max, e_mean = errors[opt.name]
        print(f"| {opt.name} | {opt.disk / mp4:,.2f} | {1 / one:,.0f} | {ref / one:,.1f} | {1 / bat:,.0f} | "
              f"{ref_b / bat:,.1f} | {e_max} | {e_mean:.3f} |", flush=True)
    print(f"\n(the batch ratios divide LeRobot's per-window time measured among the batch contenders: "
          f"{base_b * 1e3:.2f} ms, {base_b_small * 1e3:.2f} ms with the resize; load average now "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    for opt in options:
        opt.close()


def time_resize(cam: Camera) -> None:
    frames = cam.frames()
    sample = np.ascontiguousarray(frames[:: max(1, cam.n // 40)][:40])
    print(f"\n## Resize (Pillow, antialiased), {len(sample)} frames 480x640x3, one thread\n")
    print("| size | interpolation | µs/frame |")
    print("|---|---|---:|")
    for size in ((224, 224), (96, 96)):
        for interp in ("bilinear", "box"):
            t0 = time.perf_counter()
            resize_frames(sample, size, interpolation=interp, threads=1)
            print(f"| {size[0]}x{size[1]} | {interp} | {(time.perf_counter() - t0) / len(sample) * 1e6:,.0f} |")


# ------------------------------------------------------------------------------------------------ main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small run: 60 samples, 3 batches, 2 repeats, 2 synthetic "
                                                        "episodes of 90 frames, a short survey")
    p.add_argument("--samples", type=int, default=200, help="random windows timed one at a time (default 200)")
    p.add_argument("--batches", type=int, default=8, help=f"batches of {BATCH} windows timed (default 8)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--synthetic-episodes", type=int, default=6, help="episodes of the synthetic camera (0: none)")
    p.add_argument("--synthetic-length", type=int, default=300, help="frames per synthetic episode (default 300)")
    p.add_argument("--survey-frames", type=int, default=40, help="frames per camera in the codec survey (0: none)")
    p.add_argument("--jpeg", type=int, nargs="+", default=[90, 80], help="JPEG qualities in the table")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", type=Path, default=None, help="work folder, kept (reused by a later run)")
    p.add_argument("--tmp-root", type=Path, default=ROOT.parent,
                   help="where the default temp folder goes (default: the folder holding the checkout; not /tmp, "
                        "which may be RAM: raw frames take ~0.9 MB each)")
    args = p.parse_args()
    if args.quick:
        args.samples, args.batches, args.repeats = 60, 3, 2
        args.synthetic_episodes, args.synthetic_length, args.survey_frames = 2, 90, 12
    warnings.filterwarnings("ignore")
    import av

    work = args.out_dir or Path(tempfile.mkdtemp(prefix="bench_camera_options-", dir=args.tmp_root))
    work.mkdir(parents=True, exist_ok=True)
    print(f"bench_camera_options: python {sys.version.split()[0]}, numpy {np.__version__}, PyAV {av.__version__}, "
          f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; work {work}")
    try:
        cams = []
        g1 = g1_camera(work)
        if g1 is None:
            print(f"(G1-policy-train not found at {G1}: real camera skipped)")
        else:
            cams.append(g1)
        if args.synthetic_episodes:
            t0 = time.perf_counter()
            cams.append(synthetic_camera(work, args.synthetic_episodes, args.synthetic_length, args.seed))
            print(f"synthetic camera ready in {time.perf_counter() - t0:.0f} s")
        for cam in cams:
            with av.open(cam.files[0]) as c:
                s = c.streams.video[0]
                keys = [k for k, e in enumerate(s.index_entries) if e.is_keyframe][:6]
                print(f"\n{cam.name}: {s.codec_context.name} {s.codec_context.pix_fmt}, keyframes at frames {keys}...")
            if args.survey_frames:
                survey(cam, args.survey_frames)
            run_options(cam, work, args.samples, args.batches, args.repeats, args.seed, tuple(args.jpeg), check=20)
        if cams:
            time_resize(cams[0])
    finally:
        if args.out_dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
