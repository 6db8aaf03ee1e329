"""Cameras in two parts (``--parts``, default both):

- ``options``: camera storage options of the real store, end to end: disk bytes, ``ds[i]`` and ``get_batch(64)``
  throughput with 2-frame windows, and pixel error, against LeRobot's per-sample mp4 decode measured in the same run
  (described below);
- ``decoder``: a camera kept as mp4 against the decoder alone (sequential decode, one thread), per frame, on
  G1-policy-train's real AV1 camera and on 224x224 and h264 footage made from its frames with LeRobot 0.6.1's encoder
  settings; torchcodec beside PyAV where it imports; ``--before PATH``: an earlier lerobot_zarr's ``get_batch`` too
  (a checkout, timed in a child process in the same rounds); ``--footages`` to choose. See ``_video_decoder.py``
  (~8 min; ``--quick``: ~3 min).

Datasets of the options part:

- ``G1-policy-train`` (``../shared/datasets/``, LeRobot v2.1): its real camera ``observation.images.cam_high``,
  480x640 AV1 (LeRobot's encoding, a keyframe every 2 frames), opened with ``episodes=[1, 2, 4, 5]``, the only
  episodes whose mp4 files exist (skipped with a message when the folder is absent; ``--g1``, ``--g1-episodes``);
- a larger synthetic LeRobot v3.0 dataset (default 10 episodes of 150 frames): numeric data and metadata by
  ``write_sample_dataset``, two 480x640 cameras of camera-like moving scenes (the scene of
  ``bench_camera_options.py``, drawn in float32 inside each object's box: ~10x faster, the same picture, other
  noise) encoded as LeRobot does (libsvtav1, yuv420p, g=2, crf 30) into one mp4 per camera, episodes concatenated.

Each option is a real store: ``open_dataset(src, root=<store>, episodes=..., storage={cam: option},
resize={cam: (224, 224)} or none, delta_timestamps={cam: [-1/fps, 0]})`` for ``raw``, ``compact`` (zstd per
frame), ``lossless`` (delta-zstd), ``jpeg`` (q90), ``jpeg:80`` and ``mp4`` (the source's files kept, decoded on
read), each at full size and resized to 224x224 at transcode (``mp4``: resized after decoding, on read).

Per option, in the same run:

- disk: bytes of ``<store>/<camera>/`` (every camera) / bytes of the same episodes' mp4 files;
- ``ds[i]`` samples/s and ``get_batch(64)`` samples/s, and their ratio to LeRobot's per-sample decode, as
  ``decode_video_frames_torchvision`` (pyav backend) does it per camera: ``av.open`` the episode's video file, seek
  to the first requested timestamp (backward, to a keyframe), decode until the last one, pick the nearest decoded
  frame for each timestamp (within 1e-4 s), convert those to rgb24 ndarrays, close the file; one decoder thread
  (``--mp4-threads``; ~20 % faster per sample here than FFmpeg's automatic count, which LeRobot gets). For the
  224x224 rows the baseline also resizes the two frames (``lerobot_zarr.cameras.resize.resize_frame``, as a training
  transform would). The baseline returns the camera windows only, so it is a lower bound of LeRobot's cost per
  sample (which adds its HF-datasets row fetch, see ``bench_sampling.py``; and LeRobot converts every decoded
  frame and makes them float32). LeRobot has no batch path: its batch rows run the per-sample decode 64 times.
  The baseline runs interleaved with every contender block by block (25 indices for ``ds[i]``, one batch of 64
  for ``get_batch``), the order rotating per block, on the same random indices, fresh ones every repeat; medians
  over repeats, per-repeat ratio ranges in brackets. A warm variant (files kept open, a seek per sample) is timed
  beside it in the ``ds[i]`` part for the cold/warm note;
- max / mean abs pixel error of every stored frame against PyAV's decode of the same frames (for 224x224 rows:
  against ``lerobot_zarr.cameras.resize.resize_frames`` of PyAV's decode). Raises if a lossless option (raw, compact,
  lossless, mp4, at either size) is not exact, or if the baseline's windows differ from the raw stores' ones;
- transcode: seconds of the store's first ``open_dataset`` (one run, for information; no bare-decode floor: that
  comparison, formerly part 3 of this script, is dropped).

Every store file and mp4 is in the page cache when timing starts (the pixel check read all of them; one untimed
block per contender opens maps, containers and thread pools): the figures are warm-cache ones.

Everything is written under a temp folder in the folder holding the checkout by default (``--tmp-root``; not /tmp,
which may be RAM): a dataset's twelve stores exist at once (G1 ~2.9 GB, the synthetic one ~7.8 GB; checked against
the free space first) and are deleted after its rows unless ``--keep`` or ``--out-dir``. A full run takes ~10 min
on 2 CPUs. ``--quick``: one G1 episode, 3 synthetic episodes of 60 frames, fewer samples (a smoke test, ~1.5 min).

Run (from the repository root):  .venv/bin/python benchmarks/bench_video.py [--quick] [--parts options,decoder]
[--datasets g1,synthetic]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C
from _video_decoder import run_decoder_part

ROOT = Path(__file__).resolve().parents[1]
G1 = ROOT.parent / "shared" / "datasets" / "G1-policy-train"
G1_EPISODES = (1, 2, 4, 5)
SYN_CAMERAS = ("observation.images.front", "observation.images.top")
SHAPE = (480, 640, 3)
SMALL = (224, 224)
STORAGES = ("raw", "compact", "lossless", "jpeg", "jpeg:80", "mp4")
LOSSY = ("jpeg", "jpeg:80")
TOLERANCE_S = 1e-4  # LeRobot's tolerance between a requested timestamp and a decoded frame's
BATCH = 64
BLOCK = 25  # indices per interleaving block of the ds[i] part
CHECK_ROWS = 64  # frames per get_batch of the pixel check
TARGET_LOSSY = (5.0, 10.0)  # a lossy option at <= 5x the mp4's bytes and >= 10x faster than per-sample decode
TARGET_MP4 = (1.0, 3.0)  # mp4 kept: 1x the bytes and >= 3x faster
FULL = {"syn_episodes": 10, "syn_length": 150, "samples": 200, "batches": 3, "repeats": 3}
QUICK = {"syn_episodes": 3, "syn_length": 60, "samples": 50, "batches": 1, "repeats": 2}
DECODER = {"repeats": 5, "batches": 12, "check_batches": 4}  # the decoder part
DECODER_QUICK = {"repeats": 2, "batches": 3, "check_batches": 1}
PARTS = ("options", "decoder")


@dataclass(frozen=True)
class Option:
    storage: str
    resized: bool

    @property
    def label(self) -> str:
        return self.storage + (" 224x224" if self.resized else "")

    @property
    def folder(self) -> str:
        return self.storage.replace(":", "") + ("-224" if self.resized else "")

    @property
    def lossless(self) -> bool:
        return self.storage not in LOSSY


OPTIONS = [Option(s, r) for r in (False, True) for s in STORAGES]


# ------------------------------------------------------------------------------------------------ sources
@dataclass
class Source:
    """A LeRobot dataset as the benchmark sees it, read from its metadata with json / pyarrow (independent of
    lerobot_zarr): the episodes sampled, in order, their lengths and positions in the view, and each camera's
    video file and ``from_timestamp`` per episode."""

    name: str
    src: Path
    cameras: tuple[str, ...]
    selection: list[int] | None  # ``episodes=`` of open_dataset (None: all)
    fps: float
    episodes: np.ndarray
    length: np.ndarray
    files: dict[str, list[str]]
    from_ts: dict[str, np.ndarray]

    @property
    def start(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.length)[:-1]]).astype(np.int64)

    @property
    def n(self) -> int:
        return int(self.length.sum())

    def mp4_bytes(self) -> int:
        return sum(os.path.getsize(f) for cam in self.cameras for f in set(self.files[cam]))


def read_source(name: str, src: Path, selection: list[int] | None) -> Source:
    info = json.loads((src / "meta" / "info.json").read_text())
    cameras = tuple(k for k, f in info["features"].items() if f.get("dtype") == "video")
    fps = float(info["fps"])
    if info["codebase_version"].startswith("v2"):
        lengths = {r["episode_index"]: r["length"] for r in map(json.loads, (src / "meta" / "episodes.jsonl").open())}
        episodes = np.asarray(sorted(selection) if selection is not None else sorted(lengths), np.int64)
        files = {cam: [str(src / info["video_path"].format(episode_chunk=int(e) // info["chunks_size"], video_key=cam,
                                                           episode_index=int(e))) for e in episodes]
                 for cam in cameras}
        return Source(name, src, cameras, selection, fps, episodes, np.asarray([lengths[e] for e in episodes]),
                      files, {cam: np.zeros(len(episodes)) for cam in cameras})
    cols = ["episode_index", "length"] + [f"videos/{cam}/{k}" for cam in cameras
                                          for k in ("chunk_index", "file_index", "from_timestamp")]
    t = pq.read_table(sorted((src / "meta" / "episodes").glob("*/*.parquet")), columns=cols).to_pydict()
    rows = sorted(range(len(t["episode_index"])), key=lambda r: t["episode_index"][r])
    if selection is not None:
        rows = [r for r in rows if t["episode_index"][r] in set(selection)]
    files = {cam: [str(src / info["video_path"].format(video_key=cam, chunk_index=t[f"videos/{cam}/chunk_index"][r],
                                                       file_index=t[f"videos/{cam}/file_index"][r])) for r in rows]
             for cam in cameras}
    from_ts = {cam: np.asarray([t[f"videos/{cam}/from_timestamp"][r] for r in rows], np.float64) for cam in cameras}
    return Source(name, src, cameras, selection, fps, np.asarray([t["episode_index"][r] for r in rows]),
                  np.asarray([t["length"][r] for r in rows], np.int64), files, from_ts)


def _write_camera(path: str, camera: int, lengths: list[int], seed: int) -> None:
    from lerobot_zarr.cameras.video import VideoWriter

    writer = VideoWriter(path, C.FPS, SHAPE[1], SHAPE[0], SHAPE[2])
    for e, n in enumerate(lengths):
        writer.add(C.scene_frames(np.random.default_rng([seed, camera, e]), n, SHAPE))
    writer.close()


def _write_videos(src: Path, lengths: list[int], seed: int) -> None:
    """Every camera's mp4 file, one camera at a time, each in a watched child process (``C.run_watched``)."""
    from lerobot_zarr.lerobot.format import V3_VIDEO_PATH

    for k, key in enumerate(SYN_CAMERAS):
        path = src / V3_VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        C.run_watched(_write_camera, (str(path), k, lengths, seed), path, f"encoding the video of {key!r}")


def build_synthetic(work: Path, episodes: int, length: int, seed: int) -> Path:
    """Write (or reuse, same parameters) the synthetic LeRobot v3.0 dataset, every episode in one data file and
    one mp4 per camera."""
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    src = work / "synthetic"
    params = {"episodes": episodes, "length": length, "seed": seed, "cameras": list(SYN_CAMERAS), "v": 2}
    marker = work / "synthetic.params.json"
    if src.exists() and marker.exists() and json.loads(marker.read_text()) == params:
        print(f"reusing the synthetic dataset {src}")
        return src
    shutil.rmtree(src, ignore_errors=True)
    marker.unlink(missing_ok=True)
    t0 = time.perf_counter()
    write_sample_dataset(src, version="v3.0", n_episodes=episodes, lengths=(length, length), fps=C.FPS, seed=seed,
                         state_dim=C.STATE_DIM, action_dim=C.ACTION_DIM, video_keys=SYN_CAMERAS, write_videos=False,
                         image_shape=SHAPE)
    _write_videos(src, [length] * episodes, seed)
    marker.write_text(json.dumps(params))
    print(f"wrote the synthetic LeRobot v3.0 dataset in {time.perf_counter() - t0:.0f} s: {src}", flush=True)
    return src


# ------------------------------------------------------------------------------------------------ reference
def pyav_decode(path: str, from_ts: float, n: int, fps: float) -> np.ndarray:
    """PyAV's decode of the frames at ``from_ts + k / fps``, k < n (the decoded frame within 1e-4 s of each)."""
    import av

    want = from_ts + np.arange(n) / fps
    out = np.empty((n, *SHAPE), np.uint8)
    got = np.zeros(n, bool)
    with av.open(path) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        container.seek(max(0, int((from_ts - TOLERANCE_S) / stream.time_base)), backward=True, any_frame=False,
                       stream=stream)
        for frame in container.decode(stream):
            t = float(frame.time)
            if t > want[-1] + TOLERANCE_S:
                break
            j = round((t - from_ts) * fps)
            if 0 <= j < n and abs(want[j] - t) < TOLERANCE_S:
                out[j] = frame.to_ndarray(format="rgb24")
                got[j] = True
    if not got.all():
        raise AssertionError(f"{path}: no frame within {TOLERANCE_S} s of {want[~got][:3]} s")
    return out


class LeRobotPerSample:
    """LeRobot's per-sample video decode with PyAV (``decode_video_frames_torchvision``, pyav backend): per camera
    open the file (or, ``warm``, reuse an open container), seek to the first timestamp (backward, keyframe), decode
    until the last, take the nearest frame of each timestamp, convert it to an rgb24 ndarray; then resize each
    frame to ``size`` if given (a training transform)."""

    def __init__(self, source: Source, *, warm: bool = False, size: tuple[int, int] | None = None, threads: int = 1):
        self.source, self.warm, self.size, self.threads = source, warm, size, threads
        self.offsets = np.array([-1, 0])  # delta_timestamps [-1/fps, 0] in frames
        self.containers: dict[str, tuple] = {}

    def _open(self, path: str):
        import av

        container = av.open(path)
        stream = container.streams.video[0]
        if self.threads:
            stream.codec_context.thread_count = self.threads
        return container, stream

    def decode(self, path: str, timestamps: np.ndarray) -> np.ndarray:
        if self.warm:
            entry = self.containers.get(path) or self.containers.setdefault(path, self._open(path))
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

    def sample(self, i: int) -> dict[str, np.ndarray]:
        """The camera windows of position ``i`` of the view, clamped to its episode."""
        from lerobot_zarr.cameras.resize import resize_frame

        s = self.source
        k = int(np.searchsorted(s.start, i, side="right")) - 1
        q = np.clip(i - int(s.start[k]) + self.offsets, 0, int(s.length[k]) - 1)
        out = {}
        for cam in s.cameras:
            frames = self.decode(s.files[cam][k], s.from_ts[cam][k] + q / s.fps)
            out[cam] = frames if self.size is None else np.stack([resize_frame(f, self.size) for f in frames])
        return out

    def close(self) -> None:
        for container, _ in self.containers.values():
            container.close()
        self.containers.clear()


# ------------------------------------------------------------------------------------------------ checks
def pixel_errors(source: Source, plain: dict[Option, object]) -> dict[Option, tuple[int, float]]:
    """Max and mean abs error of every stored frame of every option against PyAV's decode (resized for the
    224x224 options); raises if a lossless option is not exact, or if a store's rows are not the source's
    episodes and frames in order."""
    from lerobot_zarr.cameras.resize import resize_frames

    worst = dict.fromkeys(plain, 0)
    total = dict.fromkeys(plain, 0.0)
    values = dict.fromkeys(plain, 0)
    for k, e in enumerate(source.episodes.tolist()):
        n, s = int(source.length[k]), int(source.start[k])
        ref = {cam: pyav_decode(source.files[cam][k], float(source.from_ts[cam][k]), n, source.fps)
               for cam in source.cameras}
        ref_small = {cam: resize_frames(ref[cam], SMALL) for cam in source.cameras}
        for opt, ds in plain.items():
            for lo in range(0, n, CHECK_ROWS):
                hi = min(n, lo + CHECK_ROWS)
                batch = ds.get_batch(np.arange(s + lo, s + hi))
                frames_ok = np.array_equal(batch["frame_index"], np.arange(lo, hi))
                if not ((batch["episode_index"] == e).all() and frames_ok):
                    raise AssertionError(f"{source.name} {opt.label}: rows {s + lo}..{s + hi} are not frames {lo}..{hi}"
                                         f" of episode {e}")
                for cam in source.cameras:
                    want = (ref_small if opt.resized else ref)[cam][lo:hi]
                    got = batch[cam]
                    if got.shape != want.shape or got.dtype != np.uint8:
                        raise AssertionError(f"{source.name} {opt.label} {cam}: {got.dtype}{got.shape}, expected "
                                             f"uint8{want.shape}")
                    err = np.abs(got.astype(np.int16) - want)
                    worst[opt] = max(worst[opt], int(err.max()))
                    total[opt] += float(err.sum(dtype=np.int64))
                    values[opt] += err.size
    for opt in plain:
        if opt.lossless and worst[opt]:
            raise AssertionError(f"{source.name}: the {opt.label} store differs from PyAV's decode (max abs error "
                                 f"{worst[opt]}): a lossless option must be exact")
    return {opt: (worst[opt], total[opt] / values[opt]) for opt in plain}


def check_baseline(source: Source, baselines: dict[str, LeRobotPerSample], windowed: dict[Option, object],
                   rng: np.random.Generator, n_random: int) -> int:
    """The baselines' camera windows == the raw stores' ``ds[i]`` ones (full size and 224x224), at random
    positions and episode edges, pixel for pixel."""
    idx = rng.integers(0, source.n, n_random).tolist()
    for k in range(len(source.length)):
        s, t = int(source.start[k]), int(source.start[k] + source.length[k])
        idx += [s, s + 1, t - 1]
    pairs = [(baselines["cold"], windowed[Option("raw", False)]), (baselines["warm"], windowed[Option("raw", False)]),
             (baselines["cold 224"], windowed[Option("raw", True)])]
    for i in idx:
        for base, ds in pairs:
            want, got = base.sample(i), ds[i]
            for cam in source.cameras:
                if not np.array_equal(got[cam], want[cam]):
                    raise AssertionError(f"{source.name} [{i}] {cam}: the per-sample baseline's window differs from "
                                         f"the raw store's")
    return len(idx)


# ------------------------------------------------------------------------------------------------ timing
def interleaved(fns: dict[str, Callable[[list], None]], draw: Callable[[], list[list]], repeats: int
                ) -> dict[str, list[float]]:
    """Seconds per repeat of each contender over the blocks ``draw()`` gives (fresh indices every repeat, the
    same for every contender), contenders alternating block by block, the order rotating per block. One untimed
    block each first (maps, open containers, thread pools)."""
    names = list(fns)
    warmup = draw()[0]
    for name in names:
        fns[name](warmup)
    times = {k: [0.0] * repeats for k in names}
    for r in range(repeats):
        for b, block in enumerate(draw()):
            for name in names[b % len(names):] + names[:b % len(names)]:
                t0 = time.perf_counter()
                fns[name](block)
                times[name][r] += time.perf_counter() - t0
    return times


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# ------------------------------------------------------------------------------------------------ one dataset
def run_source(source: Source, work: Path, cfg: dict, args: argparse.Namespace) -> None:
    import lerobot_zarr

    options = [o for o in OPTIONS if args.jpeg or o.storage not in LOSSY]
    mp4_bytes = source.mp4_bytes()
    window = {cam: [-1 / source.fps, 0.0] for cam in source.cameras}
    print(f"\n## {source.name}: {len(source.cameras)} camera(s) {SHAPE[0]}x{SHAPE[1]} AV1, episodes "
          f"{source.episodes.tolist() if len(source.episodes) <= 12 else f'{len(source.episodes)}'}, {source.n:,} "
          f"frames, mp4 {mp4_bytes / 1e6:.1f} MB; load average {load()}", flush=True)

    # --- the stores: first open transcodes (one run each, for information) ------------------------------------
    roots = {opt: work / f"{source.name}-{opt.folder}" for opt in options}
    frame_bytes = source.n * len(source.cameras) * int(np.prod(SHAPE))
    need = int(2.9 * frame_bytes) - sum(C.dir_bytes(r) for r in roots.values() if r.exists())  # raw 1, compact <= 0.85
    free = shutil.disk_usage(work).free
    if need > free - (1 << 30):
        raise SystemExit(f"{source.name}: its stores need ~{need / 1e9:.1f} GB more in {work}, {free / 1e9:.1f} GB "
                         f"free (keep 1 GB): choose another --tmp-root / --out-dir, or a smaller dataset")
    windowed, plain, transcode_s, disk = {}, {}, {}, {}
    for opt in options:
        root = roots[opt]
        reused = (root / "zarr.json").exists()
        t0 = time.perf_counter()
        windowed[opt] = lerobot_zarr.open_dataset(
            source.src, root=root, episodes=source.selection, delta_timestamps=window, progress=False,
            storage=dict.fromkeys(source.cameras, opt.storage),
            resize=dict.fromkeys(source.cameras, SMALL) if opt.resized else None)
        transcode_s[opt] = None if reused else time.perf_counter() - t0
        plain[opt] = lerobot_zarr.open_dataset(root, progress=False)
        if len(windowed[opt]) != source.n or len(plain[opt]) != source.n:
            raise AssertionError(f"{source.name} {opt.label}: {len(windowed[opt])} frames, expected {source.n}")
        disk[opt] = sum(C.dir_bytes(root / cam) for cam in source.cameras)
        print(f"  store {opt.label:<16} {disk[opt] / 1e6:9.1f} MB of camera, "
              + ("reused" if reused else f"transcoded in {transcode_s[opt]:.1f} s"), flush=True)

    # --- correctness: pixel error of every frame; the baseline equals the raw stores ---------------------------
    t0 = time.perf_counter()
    errors = pixel_errors(source, plain)
    for ds in plain.values():
        ds.close()
    baselines = {"cold": LeRobotPerSample(source, threads=args.mp4_threads),
                 "warm": LeRobotPerSample(source, warm=True, threads=args.mp4_threads),
                 "cold 224": LeRobotPerSample(source, size=SMALL, threads=args.mp4_threads)}
    checked = check_baseline(source, baselines, windowed, np.random.default_rng(args.seed + 1), 10)
    print(f"  pixel check of {source.n * len(source.cameras):,} frames per option against PyAV's decode (lossless "
          f"options exact) and baseline == raw store windows at {checked} positions: {time.perf_counter() - t0:.0f} s",
          flush=True)

    # --- timing ------------------------------------------------------------------------------------------------
    rng = np.random.default_rng(args.seed)

    # each result is dropped before the next call, as a training loop does (keeping a block's results alive
    # would make every call fault in fresh pages for its frames: ~10x the time of a raw ds[i] here)
    def per_sample(base: LeRobotPerSample) -> Callable[[list], None]:
        def run(block: list) -> None:
            for i in block:
                base.sample(i)
        return run

    def items(ds) -> Callable[[list], None]:
        def run(block: list) -> None:
            for i in block:
                ds[i]
        return run

    def batches(ds) -> Callable[[list], None]:
        return lambda block: ds.get_batch(block[0]) and None

    def per_sample_batch(base: LeRobotPerSample) -> Callable[[list], None]:
        return lambda block: per_sample(base)(block[0].tolist())

    def draw_items() -> list[list]:
        idx = rng.integers(0, source.n, cfg["samples"]).tolist()
        return [idx[k:k + BLOCK] for k in range(0, len(idx), BLOCK)]

    def draw_batches() -> list[list]:
        return [[rng.integers(0, source.n, BATCH)] for _ in range(cfg["batches"])]

    t0 = time.perf_counter()
    item_fns = {f"LeRobot {k}": per_sample(b) for k, b in baselines.items()}
    item_fns.update({opt.label: items(windowed[opt]) for opt in options})
    t_items = interleaved(item_fns, draw_items, cfg["repeats"])
    t_items_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    batch_fns = {"LeRobot cold": per_sample_batch(baselines["cold"]),
                 "LeRobot cold 224": per_sample_batch(baselines["cold 224"])}
    batch_fns.update({opt.label: batches(windowed[opt]) for opt in options})
    t_batch = interleaved(batch_fns, draw_batches, cfg["repeats"])
    t_batch_s = time.perf_counter() - t0
    for b in baselines.values():
        b.close()
    for ds in windowed.values():
        ds.close()
    if args.out_dir is None and not args.keep:  # the next dataset's stores get the room
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)

    # --- report ------------------------------------------------------------------------------------------------
    n_items, n_batch = cfg["samples"], cfg["batches"] * BATCH
    med = statistics.median

    def rate(ts: list[float], n: int) -> float:
        return n / med(ts)

    def ratio(base: list[float], ours: list[float]) -> tuple[float, float, float]:
        per = [b / o for b, o in zip(base, ours, strict=True)]
        return med(base) / med(ours), min(per), max(per)

    cold, warm, cold_small = t_items["LeRobot cold"], t_items["LeRobot warm"], t_items["LeRobot cold 224"]
    print(f"\n{source.name}: {cfg['repeats']} repeats of {n_items} random windows one at a time (blocks of {BLOCK}) "
          f"and {cfg['batches']} batches of {BATCH}, fresh random indices per repeat, contenders interleaved; medians "
          f"(per-repeat ratio range in brackets). Timing took {t_items_s:.0f} + {t_batch_s:.0f} s; load average "
          f"{load()}.\n")
    print(f"LeRobot per-sample decode ({len(source.cameras)} camera(s), 2-frame windows): "
          f"{med(cold) / n_items * 1e3:.1f} ms per sample ({rate(cold, n_items):,.0f} samples/s) cold (open + seek "
          f"+ decode + close per camera, LeRobot's path); warm (files kept open): {med(warm) / n_items * 1e3:.1f} ms, "
          f"cold/warm {med(cold) / med(warm):.2f}x; with the resize to 224x224: "
          f"{med(cold_small) / n_items * 1e3:.1f} ms. In the get_batch part: "
          f"{med(t_batch['LeRobot cold']) / n_batch * 1e3:.1f} ms / "
          f"{med(t_batch['LeRobot cold 224']) / n_batch * 1e3:.1f} ms per sample.\n")
    print("| option | camera bytes | disk / mp4 | ds[i] samples/s | x LeRobot | get_batch(64) samples/s | x LeRobot "
          "| max err | mean err | transcode s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary = {}
    for opt in options:
        base_i = t_items["LeRobot cold 224" if opt.resized else "LeRobot cold"]
        base_b = t_batch["LeRobot cold 224" if opt.resized else "LeRobot cold"]
        ri, rb = ratio(base_i, t_items[opt.label]), ratio(base_b, t_batch[opt.label])
        e_max, e_mean = errors[opt]
        summary[opt] = (disk[opt] / mp4_bytes, ri[0], rb[0])
        ts = transcode_s[opt]
        print(f"| {opt.label} | {disk[opt] / 1e6:,.1f} MB | {disk[opt] / mp4_bytes:,.2f}x | "
              f"{rate(t_items[opt.label], n_items):,.0f} | {ri[0]:,.1f}x [{ri[1]:,.1f}-{ri[2]:,.1f}] | "
              f"{rate(t_batch[opt.label], n_batch):,.0f} | {rb[0]:,.1f}x [{rb[1]:,.1f}-{rb[2]:,.1f}] | {e_max} | "
              f"{e_mean:.3f} | {'reused' if ts is None else f'{ts:.1f}'} |")
    mp4_warm = ratio(warm, t_items["mp4"])
    print(f"\n(mp4 kept vs LeRobot warm, files kept open: {mp4_warm[0]:.1f}x [{mp4_warm[1]:.1f}-{mp4_warm[2]:.1f}] "
          f"for ds[i]; 224x224 rows are timed against LeRobot's decode + the same resize)")

    print("\nTargets:")
    for opt in options:
        if opt.storage in LOSSY:
            size, fast_i, fast_b = summary[opt]
            ok = size <= TARGET_LOSSY[0] and fast_i >= TARGET_LOSSY[1]
            print(f"  lossy {opt.label:<14} {size:.2f}x the mp4's bytes (<= {TARGET_LOSSY[0]:g}x), ds[i] "
                  f"{fast_i:.1f}x / get_batch {fast_b:.1f}x faster (>= {TARGET_LOSSY[1]:g}x): "
                  f"{'met' if ok else 'MISSED'}{' (also by get_batch)' if ok and fast_b >= TARGET_LOSSY[1] else ''}")
    for opt in options:
        if opt.storage == "mp4":
            size, fast_i, fast_b = summary[opt]
            ok = size <= TARGET_MP4[0] * 1.01 and fast_i >= TARGET_MP4[1]
            print(f"  mp4 kept {opt.label:<11} {size:.3f}x the mp4's bytes (1x), ds[i] {fast_i:.1f}x / get_batch "
                  f"{fast_b:.1f}x faster (>= {TARGET_MP4[1]:g}x): ds[i] {'met' if ok else 'MISSED'}, get_batch "
                  f"{'met' if size <= TARGET_MP4[0] * 1.01 and fast_b >= TARGET_MP4[1] else 'MISSED'}")


# ------------------------------------------------------------------------------------------------ main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"small run: G1 episode {G1_EPISODES[0]} only, {QUICK['syn_episodes']} synthetic episodes of "
                        f"{QUICK['syn_length']} frames, {QUICK['samples']} samples, {QUICK['repeats']} repeats")
    p.add_argument("--parts", default=",".join(PARTS),
                   help="options: the storage options end to end; decoder: mp4 storage against the decoder alone per "
                        "frame, on 4 footages (default both)")
    p.add_argument("--datasets", default="g1,synthetic",
                   help="datasets of the options part, comma separated (default g1,synthetic)")
    p.add_argument("--g1", type=Path, default=G1, help="the G1-policy-train folder (default ../shared/datasets/...)")
    p.add_argument("--g1-episodes", type=int, nargs="+", default=None,
                   help=f"G1 episodes to open (default {' '.join(map(str, G1_EPISODES))}: those with mp4 files)")
    p.add_argument("--syn-episodes", type=int, default=None,
                   help=f"synthetic episodes (default {FULL['syn_episodes']})")
    p.add_argument("--syn-length", type=int, default=None, help=f"frames per synthetic episode ({FULL['syn_length']})")
    p.add_argument("--samples", type=int, default=None, help=f"ds[i] windows per repeat (default {FULL['samples']})")
    p.add_argument("--batches", type=int, default=None, help=f"batches of {BATCH} per repeat ({FULL['batches']})")
    p.add_argument("--repeats", type=int, default=None, help=f"timed repeats, medians (default {FULL['repeats']})")
    p.add_argument("--decoder-repeats", type=int, default=None,
                   help=f"repeats of the decoder part (default {DECODER['repeats']})")
    p.add_argument("--decoder-batches", type=int, default=None,
                   help=f"rounds per repeat of the decoder part, each a batch of {BATCH} windows (or {2 * BATCH} "
                        f"frames decoded in order) per contender (default {DECODER['batches']})")
    p.add_argument("--footages", default="av1-480,av1-224,h264-480,h264-224",
                   help="footages of the decoder part, comma separated (default all four: AV1 and h264, 480x640 and "
                        "224x224)")
    p.add_argument("--before", type=Path, default=None,
                   help="decoder part: also time get_batch(64) of an earlier lerobot_zarr, a checkout at this path "
                        "(e.g. `git worktree add ../before main`), in a child process in the same rounds")
    p.add_argument("--no-jpeg", dest="jpeg", action="store_false", help="leave out the jpeg options")
    p.add_argument("--mp4-threads", type=int, default=1,
                   help="decoder threads of the per-sample baseline (default 1: fastest per sample here, ~20%% faster "
                        "than 0 = FFmpeg's automatic choice, which LeRobot gets)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", type=Path, default=None,
                   help="work folder (default: a new temp dir under --tmp-root, deleted at the end unless --keep); "
                        "the synthetic dataset and the stores in it are reused by a later run")
    p.add_argument("--keep", action="store_true", help="keep the default temp folder")
    p.add_argument("--tmp-root", type=Path, default=ROOT.parent,
                   help="where the default temp folder goes (default: the folder holding the checkout; not /tmp, "
                        "which may be RAM)")
    args = p.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    for k in cfg:
        if getattr(args, k, None) is not None:
            cfg[k] = getattr(args, k)
    g1_episodes = args.g1_episodes or ([G1_EPISODES[0]] if args.quick else list(G1_EPISODES))
    wanted = {d.strip() for d in args.datasets.split(",") if d.strip()}
    if wanted - {"g1", "synthetic"}:
        p.error(f"--datasets: unknown {sorted(wanted - {'g1', 'synthetic'})}")
    parts = {d.strip() for d in args.parts.split(",") if d.strip()}
    if parts - set(PARTS):
        p.error(f"--parts: unknown {sorted(parts - set(PARTS))}")
    dcfg = dict(DECODER_QUICK if args.quick else DECODER)
    dcfg.update({k: v for k, v in (("repeats", args.decoder_repeats), ("batches", args.decoder_batches))
                 if v is not None})
    args.footages = {f.strip() for f in args.footages.split(",") if f.strip()}
    if not args.footages or args.footages - {"av1-480", "av1-224", "h264-480", "h264-224"}:
        p.error(f"--footages: av1-480, av1-224, h264-480, h264-224, got {sorted(args.footages)}")
    if args.before is not None and not (args.before / "lerobot_zarr" / "__init__.py").exists():
        p.error(f"--before: {args.before} holds no lerobot_zarr checkout")
    if args.before is not None:
        args.before = args.before.resolve()
    if args.jpeg and importlib.util.find_spec("simplejpeg") is None:
        print("(simplejpeg is not installed: the jpeg options are left out; `pip install simplejpeg` to time them)")
        args.jpeg = False
    warnings.filterwarnings("ignore")
    os.environ.setdefault("SVT_LOG", "1")
    import av

    from lerobot_zarr.frame_codecs import decode_threads

    if args.out_dir is None:
        tempfile.tempdir = str(args.tmp_root.expanduser().resolve())  # where WorkDir's mkdtemp puts the folder
    t_start = time.perf_counter()
    print(f"bench_video: python {sys.version.split()[0]}, numpy {np.__version__}, PyAV {av.__version__} (libavcodec "
          f"{'.'.join(map(str, av.library_versions['libavcodec']))}), {os.cpu_count()} CPUs, store decode threads "
          f"{decode_threads()}, load average {load()} (1, 5, 15 min)")
    with C.WorkDir(args, "bench_video-") as work:
        sources = []
        if "options" not in parts:
            wanted = set()
        if "g1" in wanted:
            if (args.g1 / "meta" / "info.json").exists():
                sources.append(read_source("G1-policy-train", args.g1, g1_episodes))
            else:
                print(f"(G1-policy-train not found at {args.g1}: its rows are skipped)")
        if "synthetic" in wanted:
            src = build_synthetic(work, cfg["syn_episodes"], cfg["syn_length"], args.seed)
            sources.append(read_source("synthetic", src, None))
        for source in sources:
            missing = [f for cam in source.cameras for f in source.files[cam] if not os.path.exists(f)]
            if missing:
                raise SystemExit(f"{source.name}: video file {missing[0]} not found (choose episodes with mp4 files)")
            run_source(source, work, cfg, args)
        if "decoder" in parts:
            if (args.g1 / "meta" / "info.json").exists():
                run_decoder_part(args, work, args.g1, g1_episodes, dcfg)
            else:
                print(f"(G1-policy-train not found at {args.g1}: the decoder part is skipped)")
    print(f"\n(total wall time {time.perf_counter() - t_start:.0f} s; load average now {load()}: 1, 5, 15 min, on "
          f"{os.cpu_count()} CPUs shared with other tenants)")


if __name__ == "__main__":
    main()
