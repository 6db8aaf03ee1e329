"""Cameras kept as mp4: sampling from the store (raw and compact) vs LeRobot's per-sample decode, disk, transcode.

Builds a synthetic LeRobot v3.0 dataset (default 10 episodes of 100-150 frames, ~1,250 frames) with two 480x640
cameras stored as real AV1 mp4 files, LeRobot's encoding (libsvtav1, yuv420p, g=2, crf 30: byte for byte the files
``write_sample_dataset(..., write_videos=True)`` writes, with its frame generator redone ~10x faster in uint8
arithmetic), plus ``observation.state`` / ``action`` f32[14]. Sample spec: ``delta_timestamps`` ``[-1/fps, 0]`` on both cameras and on
the state, ``[k/fps, k=0..15]`` on the action. Then, in the same run:

1. Random access, µs per sample on the same seeded random indices, contenders interleaved block by block (A B C D
   A B C D ... over blocks of 25 indices) so that noise from other tenants hits all alike; medians of repeats:

   - ours, raw storage:     ``open_dataset(folder, root=store, delta_timestamps=..., storage={cam: "raw"})[i]``
   - ours, compact storage: the same with ``storage={cam: "compact"}`` (zstd per frame)
   - (and ``get_batch`` of 32 indices, per sample, for both)
   - mp4 per sample, cold:  what LeRobot's ``decode_video_frames_torchvision`` (pyav backend) does per camera:
     ``av.open`` the camera's video file, seek to the first requested timestamp (backward, to a keyframe), decode
     until the last requested timestamp, pick the nearest decoded frame for each timestamp (tolerance 1e-4 s),
     convert those to rgb24 ndarrays, close the file;
   - mp4 per sample, warm:  the same with every video file kept open (a seek per sample, no open).

   The mp4 baselines use one decoder thread (``--mp4-threads``): per sample that was ~20 % faster here than
   FFmpeg's automatic thread count, which is what LeRobot gets.

   The mp4 baselines return the camera windows only, get their query timestamps precomputed, and convert only
   the chosen frames to rgb24 (torchvision converts every decoded frame, LeRobot then also makes them float32):
   they are lower bounds of LeRobot's cost per sample, which adds its HF-datasets row fetch (bench_sampling.py).
   Before timing, the camera windows of ours (raw and compact) are checked equal, pixel for pixel, to the
   baseline's decode at random frames and episode edges (raises if not).

2. Disk: bytes of each camera array in the store, raw vs compact, vs the mp4 files.

3. Transcode throughput of the cameras: frames decoded into a fresh store per second (``open_dataset(...,
   episodes=<first k>)``, raw and compact), vs the floor: PyAV decoding the same episodes of the same mp4 files
   to rgb24 ndarrays and discarding them, with the transcoder's parallelism (a thread pool of min(8, CPUs)
   workers over (episode, camera), ``thread_type="AUTO"``). Runs interleaved, ``os.sync()`` and a wait for an idle
   disk before each (as bench_transcode.py); medians.

Everything is written under a temp folder in the folder holding the checkout by default (``--tmp-root``; not /tmp,
which may be tmpfs: the raw store takes 1.84 GB per 1,000 frames of two 480x640 cameras). ``--quick``: 4 short
episodes, for a smoke test (~1 min).

Run (from the repository root):  .venv/bin/python benchmarks/bench_video.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

CAMERAS = ("observation.images.front", "observation.images.top")
SHAPE = (480, 640, 3)
TOLERANCE_S = 1e-4  # LeRobot's tolerance between a requested timestamp and a decoded frame's
TARGET_SPEEDUP = 20.0  # per-sample mp4 decode / ours (raw) >= 20
BLOCK = 25  # indices per interleaving block
BATCH = 32
INNER_RAW = 4  # ours raw is ~50x faster than the mp4 rows: each of its slots runs its block 4 times (divided out)
FULL = {"episodes": 10, "lengths": (100, 150), "samples": 200, "repeats": 3, "transcode_episodes": 2,
        "transcode_runs": 3}
QUICK = {"episodes": 4, "lengths": (40, 60), "samples": 50, "repeats": 2, "transcode_episodes": 2,
         "transcode_runs": 2}


def delta_timestamps() -> dict[str, list[float]]:
    window = [-1 / C.FPS, 0.0]
    return {**{cam: window for cam in CAMERAS}, "observation.state": window,
            "action": [k / C.FPS for k in range(16)]}


# ------------------------------------------------------------------------------------------------ dataset
def camera_frames(key_number: int, episode: int, length: int, seed: int) -> np.ndarray:
    """``lerobot_zarr.sample_data.camera_frames`` (gradient + noise), the same bytes ~10x faster: uint8 arithmetic
    (mod 256 by wrap-around) instead of int64 arrays, and the noise from the raw PCG64 stream (``integers(0, 8)``
    is the top 3 bits of each ``next_uint32``, i.e. of the low then the high half of each 64-bit output)."""
    height, width, channels = SHAPE
    rng = np.random.default_rng([seed, key_number, episode])
    n = length * height * width * channels
    raw = rng.bit_generator.random_raw((n + 1) // 2).view("<u4")[:n]
    noise = (raw >> np.uint32(29)).astype(np.uint8).reshape(length, height, width, channels)
    y, x = np.mgrid[0:height, 0:width]
    xy = ((x * 3 + y * 2) % 256).astype(np.uint8)[:, :, None]
    shift = ((np.arange(length)[:, None] * 5 + np.arange(channels)[None, :] * 40 + episode * 17 + key_number * 31)
             % 256).astype(np.uint8)
    out = np.empty((length, height, width, channels), np.uint8)
    for t in range(length):
        base = xy + shift[t]  # wraps: the library's "% 256"
        frame = base + noise[t]
        frame[frame < base] = 255  # the library's clip(.., 0, 255) of base + noise
        out[t] = frame
    return out


def _write_camera(src: str, key_number: int, key: str, lengths: list[int], per_file: int, seed: int) -> None:
    """One camera's mp4 files, byte for byte what ``write_sample_dataset(write_videos=True)`` writes (v3.0)."""
    from lerobot_zarr.sample_data import CHUNKS_SIZE, V3_VIDEO_PATH
    from lerobot_zarr.sample_data import camera_frames as library_frames
    from lerobot_zarr.video import VideoWriter

    height, width, channels = SHAPE
    for number in range((len(lengths) + per_file - 1) // per_file):
        path = Path(src) / V3_VIDEO_PATH.format(video_key=key, chunk_index=number // CHUNKS_SIZE,
                                                 file_index=number % CHUNKS_SIZE)
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = VideoWriter(path, C.FPS, width, height, channels)
        for e in range(number * per_file, min((number + 1) * per_file, len(lengths))):
            frames = camera_frames(key_number, e, lengths[e], seed)
            head = min(2, lengths[e])  # the library's first frames are a prefix of its longer episodes
            if not np.array_equal(frames[:head], library_frames(key_number, e, head, SHAPE, seed)):
                raise AssertionError(f"camera_frames differs from lerobot_zarr.sample_data.camera_frames (episode {e})")
            writer.add(frames)
        writer.close()


def _write_videos(src: Path, lengths: list[int], per_file: int, seed: int, stall_s: float = 60.0,
                  start_s: float = 300.0, attempts: int = 3) -> None:
    """Every camera's mp4 files, one camera at a time, each in a child process that is killed and started again
    if it fails, or if its file stops growing for ``stall_s`` (or has no byte after ``start_s``: starting a
    process can take long on a busy disk). SVT-AV1 4.2.0 (PyAV 19.0.2's wheel) deadlocked here (every encoder
    thread idle, the caller stuck in ``svt_av1_enc_send_picture``) or emitted a packet the muxer refused (EINVAL,
    then a hang in ``svt_av1_enc_deinit``) in 3 of 12 camera encodes when two encoders ran at once on this 2-core
    VM, in none of 10 run one at a time."""
    ctx = mp.get_context("spawn")
    for k, key in enumerate(CAMERAS):
        folder = src / "videos" / key
        for attempt in range(1, attempts + 1):
            shutil.rmtree(folder, ignore_errors=True)
            proc = ctx.Process(target=_write_camera, args=(str(src), k, key, lengths, per_file, seed), daemon=True)
            proc.start()
            size, changed, why = 0, time.monotonic(), ""
            while proc.is_alive():
                proc.join(0.5)
                now_size = C.dir_bytes(folder) if folder.exists() else 0
                if now_size != size:
                    size, changed = now_size, time.monotonic()
                elif proc.is_alive() and time.monotonic() - changed > (stall_s if size else start_s):
                    why = f"no output for {stall_s if size else start_s:.0f} s, at {size:,} bytes"
                    proc.kill()
                    proc.join()
            if proc.exitcode == 0:
                break
            why = why or f"exit code {proc.exitcode}"
            if attempt == attempts:
                raise RuntimeError(f"encoding the videos of {key!r} failed {attempts} times (last: {why})")
            print(f"(encoding the videos of {key!r} failed: {why}; writing them again)", flush=True)


def build_dataset(work: Path, episodes: int, lengths: tuple[int, int], episodes_per_file: int | None,
                  seed: int) -> tuple[Path, bool]:
    """Write (or reuse, same parameters) the dataset: numeric data and metadata by ``write_sample_dataset``, the
    cameras' mp4 files as its ``write_videos=True`` does."""
    from lerobot_zarr.sample_data import write_sample_dataset

    src = work / "lerobot_video_dataset"
    params = {"episodes": episodes, "lengths": list(lengths), "episodes_per_file": episodes_per_file, "seed": seed,
              "fps": C.FPS, "cameras": list(CAMERAS), "shape": list(SHAPE)}
    marker = work / "lerobot_video_dataset.params.json"
    if src.exists() and marker.exists() and json.loads(marker.read_text()) == params:
        print(f"reusing LeRobot dataset {src}")
        return src, True
    shutil.rmtree(src, ignore_errors=True)
    marker.unlink(missing_ok=True)
    t0 = time.perf_counter()
    write_sample_dataset(src, version="v3.0", n_episodes=episodes, lengths=lengths, fps=C.FPS, seed=seed,
                         state_dim=C.STATE_DIM, action_dim=C.ACTION_DIM, video_keys=CAMERAS, write_videos=False,
                         image_shape=SHAPE, episodes_per_file=episodes_per_file)
    start, end, _ = C.read_episode_table(src)
    _write_videos(src, (end - start).tolist(), episodes_per_file or episodes, seed)
    marker.write_text(json.dumps(params))
    print(f"wrote LeRobot v3.0 dataset with AV1 videos in {time.perf_counter() - t0:.1f} s: {src}")
    return src, False


class Episodes:
    """Episode bounds and each camera's video file and ``from_timestamp``, read from the LeRobot metadata with
    pyarrow (independent of lerobot_zarr)."""

    def __init__(self, src: Path):
        info = json.loads((src / "meta" / "info.json").read_text())
        self.fps = float(info["fps"])
        self.start, end, _ = C.read_episode_table(src)
        self.length = end - self.start
        cols = ["episode_index"] + [f"videos/{cam}/{k}" for cam in CAMERAS
                                    for k in ("chunk_index", "file_index", "from_timestamp")]
        t = pq.read_table(min((src / "meta" / "episodes").glob("*/*.parquet")), columns=cols)
        order = np.argsort(t.column("episode_index").to_numpy())
        self.file: dict[str, list[str]] = {}
        self.from_ts: dict[str, np.ndarray] = {}
        for cam in CAMERAS:
            chunk = t.column(f"videos/{cam}/chunk_index").to_numpy()[order]
            fileno = t.column(f"videos/{cam}/file_index").to_numpy()[order]
            self.file[cam] = [str(src / info["video_path"].format(video_key=cam, chunk_index=int(c), file_index=int(f)))
                              for c, f in zip(chunk, fileno, strict=True)]
            self.from_ts[cam] = t.column(f"videos/{cam}/from_timestamp").to_numpy()[order].astype(np.float64)


# ------------------------------------------------------------------------------------------------ baseline
class Mp4PerSample:
    """LeRobot's per-sample video decode with PyAV (``decode_video_frames_torchvision``, pyav backend): per camera
    open the file (cold) or reuse an open container (warm), seek to the first timestamp (backward, keyframe),
    decode until the last, take the nearest frame of each timestamp, convert it to an rgb24 ndarray."""

    def __init__(self, eps: Episodes, deltas: dict[str, list[float]], warm: bool, threads: int):
        self.eps, self.warm, self.threads = eps, warm, threads
        self.offsets = {cam: np.round(np.asarray(deltas[cam]) * eps.fps).astype(np.int64) for cam in CAMERAS}
        self.containers: dict[str, tuple] = {}

    def queries(self, i: int) -> dict[str, tuple[str, np.ndarray]]:
        """Per camera: (video file, timestamps in the file) of frame ``i``'s window, clamped to its episode."""
        e = int(np.searchsorted(self.eps.start, i, side="right")) - 1
        local, n = i - int(self.eps.start[e]), int(self.eps.length[e])
        out = {}
        for cam in CAMERAS:
            q = np.clip(local + self.offsets[cam], 0, n - 1)
            out[cam] = (self.eps.file[cam][e], self.eps.from_ts[cam][e] + q / self.eps.fps)
        return out

    def _open(self, path: str):
        import av

        container = av.open(path)
        stream = container.streams.video[0]
        if self.threads:
            stream.codec_context.thread_count = self.threads
        return container, stream

    def decode(self, path: str, timestamps: np.ndarray) -> np.ndarray:
        if self.warm:
            entry = self.containers.get(path)
            if entry is None:
                entry = self.containers[path] = self._open(path)
            container, stream = entry
        else:
            container, stream = self._open(path)
        try:
            first, last = float(timestamps.min()), float(timestamps.max())
            container.seek(round(first / stream.time_base), backward=True, any_frame=False, stream=stream)
            frames, times = [], []
            for frame in container.decode(stream):
                t = float(frame.time)
                frames.append(frame)
                times.append(t)
                if t >= last - TOLERANCE_S:
                    break
            dist = np.abs(timestamps[:, None] - np.asarray(times)[None, :])
            nearest = dist.argmin(axis=1)
            if not (dist[np.arange(len(timestamps)), nearest] < TOLERANCE_S).all():
                raise AssertionError(f"{path}: no frame within {TOLERANCE_S} s of {timestamps} (decoded {times})")
            return np.stack([frames[j].to_ndarray(format="rgb24") for j in nearest.tolist()])
        finally:
            if not self.warm:
                container.close()

    def sample(self, q: dict[str, tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {cam: self.decode(path, ts) for cam, (path, ts) in q.items()}

    def close(self) -> None:
        for container, _ in self.containers.values():
            container.close()
        self.containers.clear()


# ------------------------------------------------------------------------------------------------ floor
def floor_decode(jobs: list[tuple[str, float, int]], fps: float, workers: int) -> int:
    """Decode the frames of (video file, from_timestamp, frames) jobs to rgb24 ndarrays and drop them; the
    transcoder's parallelism (thread pool over jobs, ``thread_type="AUTO"``). Returns the frames decoded."""
    import av

    def one(job: tuple[str, float, int]) -> int:
        path, t0, n = job
        first, end = t0 - TOLERANCE_S, t0 + (n - 0.5) / fps
        k = 0
        with av.open(path) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            container.seek(max(0, int(first / stream.time_base)), backward=True, any_frame=False, stream=stream)
            for frame in container.decode(stream):
                t = float(frame.time)
                if t < first:
                    continue
                if t > end:
                    break
                frame.to_ndarray(format="rgb24")
                k += 1
        if k != n:
            raise AssertionError(f"{path}: floor decoded {k} of {n} frames")
        return k

    with ThreadPoolExecutor(max(1, workers)) as pool:
        return sum(pool.map(one, jobs))


# ------------------------------------------------------------------------------------------------ checks
def check_equal(datasets: dict[str, object], mp4: Mp4PerSample, eps: Episodes, rng: np.random.Generator,
                n_random: int) -> int:
    """Camera windows of every dataset == the per-sample decode of the mp4, pixel for pixel (raises if not)."""
    n = int(eps.start[-1] + eps.length[-1])
    idx = rng.integers(0, n, n_random).tolist()
    for e in rng.choice(len(eps.start), size=min(3, len(eps.start)), replace=False).tolist():
        s, t = int(eps.start[e]), int(eps.start[e] + eps.length[e])
        idx += [s, s + 1, t - 1]
    for i in idx:
        want = mp4.sample(mp4.queries(i))
        for name, ds in datasets.items():
            got = ds[i]
            for cam in CAMERAS:
                a, b = got[cam], want[cam]
                if a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a, b):
                    diff = (np.abs(a.astype(np.int16) - b.astype(np.int16)).max() if a.shape == b.shape else "-")
                    raise AssertionError(f"{name}[{i}][{cam!r}]: {a.dtype}{a.shape} differs from the mp4 decode "
                                         f"{b.dtype}{b.shape} (max abs diff {diff})")
    return len(idx)


# ------------------------------------------------------------------------------------------------ timing
def interleaved_blocks(fns: dict[str, tuple[Callable[[list], None], int]], blocks: list[list], repeats: int
                       ) -> dict[str, list[float]]:
    """Seconds per repeat for each contender over all ``blocks``; contenders alternate block by block (the order
    rotating per block), each running a block ``inner`` times in its slot (time divided by ``inner``)."""
    names = list(fns)
    times = {k: [0.0] * repeats for k in names}
    for r in range(repeats):
        for b, block in enumerate(blocks):
            for name in names[b % len(names):] + names[:b % len(names)]:
                fn, inner = fns[name]
                t0 = time.perf_counter()
                for _ in range(inner):
                    fn(block)
                times[name][r] += (time.perf_counter() - t0) / inner
    return times


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


# ------------------------------------------------------------------------------------------------ main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"small run: {QUICK['episodes']} episodes of {QUICK['lengths'][0]}-{QUICK['lengths'][1]} "
                        f"frames, {QUICK['samples']} samples, {QUICK['repeats']} repeats")
    p.add_argument("--episodes", type=int, default=None, help=f"episodes (default {FULL['episodes']})")
    p.add_argument("--lengths", type=int, nargs=2, default=None, metavar=("LO", "HI"),
                   help=f"frames per episode, inclusive range (default {FULL['lengths'][0]} {FULL['lengths'][1]})")
    p.add_argument("--episodes-per-file", type=int, default=None,
                   help="episodes per data / video file (default: all in one, ~45 MB per camera at full size; "
                        "LeRobot's video files go up to 200 MB)")
    p.add_argument("--samples", type=int, default=None, help=f"random indices timed (default {FULL['samples']})")
    p.add_argument("--repeats", type=int, default=None, help=f"timed repeats, medians (default {FULL['repeats']})")
    p.add_argument("--transcode-episodes", type=int, default=None,
                   help=f"episodes transcoded per timed transcode run (default {FULL['transcode_episodes']})")
    p.add_argument("--transcode-runs", type=int, default=None,
                   help=f"timed transcode runs per contender (default {FULL['transcode_runs']})")
    p.add_argument("--mp4-threads", type=int, default=1,
                   help="decoder threads of the per-sample mp4 baselines (default 1: fastest per sample here, "
                        "~20%% faster than 0 = FFmpeg's automatic choice, which LeRobot gets)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", type=Path, default=None,
                   help="work folder (default: a new temp dir under --tmp-root, deleted at the end unless --keep); "
                        "the dataset and stores in it are reused by a later run with the same parameters")
    p.add_argument("--keep", action="store_true", help="keep the default temp folder")
    p.add_argument("--tmp-root", type=Path, default=Path(__file__).resolve().parents[2],
                   help="where the default temp folder goes (default: the folder holding the checkout; not /tmp, "
                        "which may be RAM)")
    args = p.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    for k in cfg:
        if getattr(args, k, None) is not None:
            cfg[k] = tuple(getattr(args, k)) if k == "lengths" else getattr(args, k)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("SVT_LOG", "1")
    import av

    import lerobot_zarr

    if args.out_dir is None:
        tempfile.tempdir = str(args.tmp_root.expanduser().resolve())  # where WorkDir's mkdtemp puts the folder
    deltas = delta_timestamps()
    workers = min(8, len(os.sched_getaffinity(0)))  # the transcoder's decode pool
    t_start = time.perf_counter()
    with C.WorkDir(args, "bench_video-") as work:
        src, reused = build_dataset(work, cfg["episodes"], cfg["lengths"], args.episodes_per_file, args.seed)
        eps = Episodes(src)
        n = int(eps.start[-1] + eps.length[-1])
        with av.open(eps.file[CAMERAS[0]][0]) as c:
            decoder = c.streams.video[0].codec_context.name
        print(f"bench_video: {len(eps.start)} episodes of {cfg['lengths'][0]}-{cfg['lengths'][1]} frames ({n:,} "
              f"frames), 2 cameras {SHAPE[0]}x{SHAPE[1]} AV1 mp4 (libsvtav1 yuv420p g=2 crf 30), state/action "
              f"f32[14]; python {sys.version.split()[0]}, numpy {np.__version__}, PyAV {av.__version__} (libavcodec "
              f"{'.'.join(map(str, av.library_versions['libavcodec']))}, AV1 decoder {decoder}), "
              f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")

        # --- the stores: first open transcodes (timed once, for information) ---------------------------------
        stores = {"raw": work / "store_raw", "compact": work / "store_compact"}
        if not reused:
            for d in stores.values():
                shutil.rmtree(d, ignore_errors=True)
        ds, first_open = {}, {}
        for kind, root in stores.items():
            C.settle_disk(work)
            t0 = time.perf_counter()
            ds[kind] = lerobot_zarr.open_dataset(src, root=root, delta_timestamps=deltas,
                                                 storage={cam: kind for cam in CAMERAS}, progress=False)
            first_open[kind] = time.perf_counter() - t0
            assert len(ds[kind]) == n, (len(ds[kind]), n)
        print("first open_dataset (transcode of every episode, single run): " + ", ".join(
            f"{kind} {t:.1f} s ({2 * n / t:,.0f} camera frames/s)" for kind, t in first_open.items())
            + (" [stores reused]" if reused else ""))

        cold = Mp4PerSample(eps, deltas, warm=False, threads=args.mp4_threads)
        warm = Mp4PerSample(eps, deltas, warm=True, threads=args.mp4_threads)
        rng = np.random.default_rng(args.seed)
        checked = check_equal({"ours raw": ds["raw"], "ours compact": ds["compact"]}, cold, eps,
                              np.random.default_rng(args.seed + 1), n_random=10 if args.quick else 20)
        print(f"equality check passed: camera windows of ours (raw and compact) == per-sample mp4 decode, pixel "
              f"for pixel, at {checked} frames (random + episode edges)")

        # --- 1. random access ---------------------------------------------------------------------------
        items = rng.integers(0, n, cfg["samples"]).tolist()
        blocks = [items[k:k + BLOCK] for k in range(0, len(items), BLOCK)]
        queries = {i: cold.queries(i) for i in set(items)}  # the baselines get their timestamps for free
        batches = [rng.integers(0, n, BATCH) for _ in range(max(1, len(items) // BATCH))]
        batch_blocks = [batches[k:k + 2] for k in range(0, len(batches), 2)]

        def items_of(get):
            def run(block):
                for i in block:
                    get(i)
            return run

        def mp4_of(sampler):
            def run(block):
                for i in block:
                    sampler.sample(queries[i])
            return run

        def batches_of(d):
            def run(block):
                for b in block:
                    d.get_batch(b)
            return run

        contenders = {"ours raw": (items_of(ds["raw"].__getitem__), INNER_RAW),
                      "ours compact": (items_of(ds["compact"].__getitem__), 1),
                      "mp4 cold": (mp4_of(cold), 1),
                      "mp4 warm": (mp4_of(warm), 1)}
        # warm-up: page cache of the stores' frames at these indices and of the mp4 files, maps, open containers
        for name, (fn, _) in contenders.items():
            for block in (blocks if name.startswith("ours") else blocks[:1]):
                fn(block)
        for d in ds.values():
            batches_of(d)(batches)
        t_items = interleaved_blocks(contenders, blocks, cfg["repeats"])
        t_batch = interleaved_blocks({"ours raw": (batches_of(ds["raw"]), 1),
                                      "ours compact": (batches_of(ds["compact"]), 1)}, batch_blocks,
                                     cfg["repeats"])
        warm.close()

        # --- 2. disk -------------------------------------------------------------------------------------
        disk = {cam: {"mp4": sum(os.path.getsize(f) for f in set(eps.file[cam])),
                      "raw": C.dir_bytes(stores["raw"] / cam),
                      "compact": C.dir_bytes(stores["compact"] / cam)} for cam in CAMERAS}
        numeric = {kind: C.dir_bytes(root) - sum(disk[cam][kind] for cam in CAMERAS) for kind, root in stores.items()}

        # --- 3. transcode throughput -----------------------------------------------------------------------
        subset = list(range(min(cfg["transcode_episodes"], len(eps.start))))
        jobs = [(eps.file[cam][e], float(eps.from_ts[cam][e]), int(eps.length[e])) for e in subset for cam in CAMERAS]
        tc_frames = sum(j[2] for j in jobs)
        runs_dir = work / "transcode_runs"
        shutil.rmtree(runs_dir, ignore_errors=True)
        runs_dir.mkdir()
        counter = iter(range(10**9))

        def transcode(kind: str) -> Callable[[], None]:
            def run() -> None:
                lerobot_zarr.open_dataset(src, root=runs_dir / f"{kind}-{next(counter)}", episodes=subset,
                                          storage={cam: kind for cam in CAMERAS}, progress=False)
            return run

        tc_fns = {"ours raw": transcode("raw"), "ours compact": transcode("compact"),
                  "floor": lambda: floor_decode(jobs, eps.fps, workers)}
        tc_times: dict[str, list[float]] = {k: [] for k in tc_fns}
        waited = []
        for _ in range(cfg["transcode_runs"]):
            for name, fn in tc_fns.items():
                waited.append(C.settle_disk(runs_dir))  # earlier runs' dirty pages are not billed to this one
                t0 = time.perf_counter()
                fn()
                tc_times[name].append(time.perf_counter() - t0)
        last_raw = max(runs_dir.glob("raw-*"), key=lambda q: int(q.name.split("-")[1]))
        check = lerobot_zarr.open_dataset(last_raw, delta_timestamps=deltas, progress=False)
        for i in (0, len(check) - 1):
            for cam in CAMERAS:
                if not np.array_equal(check[i][cam], ds["raw"][i][cam]):
                    raise AssertionError(f"timed transcode {last_raw}: frame {i} of {cam!r} differs from the store")
        tc_bytes = {kind: sum(C.dir_bytes(min(runs_dir.glob(f"{kind}-*")) / cam) for cam in CAMERAS)
                    for kind in ("raw", "compact")}
        shutil.rmtree(runs_dir, ignore_errors=True)

    total_s = time.perf_counter() - t_start

    # ------------------------------------------------------------------------------------------------ report
    k_items = len(items)
    us = {name: [t / k_items * 1e6 for t in ts] for name, ts in t_items.items()}
    us_b = {name: [t / (BATCH * len(batches)) * 1e6 for t in ts] for name, ts in t_batch.items()}
    med = {name: C.median(v) for name, v in us.items()}
    print(f"\n1. Random access, {n:,} frames, 2 cameras {SHAPE[0]}x{SHAPE[1]} x 2-frame windows + state/action; "
          f"µs per sample, median (and best) of {cfg['repeats']} repeats over the same {k_items} seeded random "
          f"indices, interleaved in blocks of {BLOCK}")
    print(f"{'':<58}{'median µs':>11}{'best µs':>10}{'samples/s':>11}")
    rows = [("ours ds[i], raw storage (memory mapped)", us["ours raw"]),
            ("ours ds[i], compact storage (zstd per frame)", us["ours compact"]),
            (f"ours get_batch({BATCH}) per sample, raw", us_b["ours raw"]),
            (f"ours get_batch({BATCH}) per sample, compact", us_b["ours compact"]),
            ("mp4 per sample, cold (av.open + seek + decode per camera)", us["mp4 cold"]),
            ("mp4 per sample, warm (containers kept open: seek + decode)", us["mp4 warm"])]
    for name, v in rows:
        print(f"{name:<58}{C.median(v):>11,.0f}{min(v):>10,.0f}{1e6 / C.median(v):>11,.0f}")

    def mark(ratio: float) -> str:
        return f"(target >= {TARGET_SPEEDUP:g}x: {'meets target' if ratio >= TARGET_SPEEDUP else 'MISSES target'})"

    print("\n   Ratios, baseline / ours (medians; per-repeat ratios min-max in brackets)")
    for base in ("mp4 cold", "mp4 warm"):
        for ours in ("ours raw", "ours compact"):
            r = med[base] / med[ours]
            per = [b / o for b, o in zip(us[base], us[ours], strict=True)]
            print(f"   {base} / {ours:<13} {r:7.1f}x  [{min(per):.1f}-{max(per):.1f}]  "
                  f"{mark(r) if ours == 'ours raw' else ''}")
    print(f"   compact / raw ds[i]           {med['ours compact'] / med['ours raw']:7.2f}x   (the price of compact "
          f"storage per sample: 4 zstd frame decompressions of {np.prod(SHAPE) / 1e3:.0f} kB)")
    print(f"   compact / raw get_batch       {C.median(us_b['ours compact']) / C.median(us_b['ours raw']):7.2f}x")
    print("   (the mp4 rows are lower bounds of LeRobot's per-sample cost: camera windows only, timestamps "
          "precomputed, only the chosen frames converted to rgb24, no float32 conversion)")

    print(f"\n2. Disk, bytes of each camera ({n:,} frames of {SHAPE[0]}x{SHAPE[1]}x{SHAPE[2]} uint8 = "
          f"{mb(n * np.prod(SHAPE))} decoded)")
    print(f"{'':<28}{'mp4 (AV1)':>14}{'store raw':>14}{'store compact':>16}{'raw/mp4':>9}{'compact/mp4':>13}"
          f"{'raw/compact':>13}")
    tot = {k: sum(disk[cam][k] for cam in CAMERAS) for k in ("mp4", "raw", "compact")}
    for name, d in [*disk.items(), ("both cameras", tot)]:
        print(f"{name:<28}{mb(d['mp4']):>14}{mb(d['raw']):>14}{mb(d['compact']):>16}{d['raw'] / d['mp4']:>8.1f}x"
              f"{d['compact'] / d['mp4']:>12.1f}x{d['raw'] / d['compact']:>12.2f}x")
    print(f"   (rest of each store: numeric features + metadata, raw {numeric['raw'] / 1e3:,.0f} kB, compact "
          f"{numeric['compact'] / 1e3:,.0f} kB)")
    print(f"   trade-off: compact saves {1 - tot['compact'] / tot['raw']:.0%} of the camera bytes of raw storage and "
          f"costs {med['ours compact'] / med['ours raw']:.1f}x the time per ds[i] sample "
          f"({med['ours compact'] - med['ours raw']:,.0f} µs more); both stay "
          f"{min(med['mp4 warm'], med['mp4 cold']) / med['ours compact']:.0f}x+ faster than per-sample decode")
    print("   (this synthetic video is a gradient plus uniform noise: compact ratios on real camera footage differ)")

    fps_of = {name: tc_frames / C.median(ts) for name, ts in tc_times.items()}
    print(f"\n3. Transcode throughput of the cameras: episodes {subset[0]}-{subset[-1]} ({tc_frames:,} camera frames), "
          f"median (and best) of {cfg['transcode_runs']} runs into fresh folders, interleaved; decode pool of "
          f"{workers} workers; frames/s and ours/floor time ratio from the medians (and bests)")
    print(f"{'':<58}{'median s':>10}{'best s':>9}{'frames/s':>10}{'ours/floor':>12}{'(best)':>8}")
    labels = {"ours raw": "ours open_dataset(episodes=...), raw storage",
              "ours compact": "ours open_dataset(episodes=...), compact storage",
              "floor": "floor: PyAV decode to rgb24 ndarrays, nothing written"}
    for name, ts in tc_times.items():
        ratio, ratio_best = C.median(ts) / C.median(tc_times["floor"]), min(ts) / min(tc_times["floor"])
        print(f"{labels[name]:<58}{C.median(ts):>10.2f}{min(ts):>9.2f}{fps_of[name]:>10,.0f}{ratio:>11.2f}x"
              f"{ratio_best:>7.2f}x")
    print(f"   written per run: raw {mb(tc_bytes['raw'])}, compact {mb(tc_bytes['compact'])} of camera chunks "
          f"(+ the episodes' numeric data); before each run os.sync() and a wait for an idle disk, "
          f"{C.median(waited):.1f} s median wait; the transcoder's os.sync() at each commit also waits for other "
          f"processes' dirty pages, which shows as outliers on a shared disk)")
    print(f"\n(total wall time {total_s:.0f} s; load average now {' '.join(f'{x:.1f}' for x in os.getloadavg())}: "
          f"1, 5, 15 min, on {os.cpu_count()} CPUs shared with other tenants)")


if __name__ == "__main__":
    main()
