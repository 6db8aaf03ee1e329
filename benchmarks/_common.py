"""Helpers shared by the benchmarks (not part of the library): dataset building, parquet reading, timing, RSS.

Everything here is independent of ``lerobot_zarr`` internals on purpose: the baselines read the LeRobot parquet
files with pyarrow directly, so they also serve as an independent check of what the library returns.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FPS = 30
STATE_DIM = 14
ACTION_DIM = 14
DEFAULT_EPISODES = 2000
LENGTHS = (300, 700)
# Every numeric feature the store holds for this dataset, in LeRobot's column order.
FEATURES = ("observation.state", "action", "timestamp", "frame_index", "episode_index", "index", "task_index")


def add_dataset_args(parser) -> None:
    parser.add_argument("--episodes", type=int, default=DEFAULT_EPISODES,
                        help=f"episodes of {LENGTHS[0]}-{LENGTHS[1]} frames (default {DEFAULT_EPISODES}, ~1e6 frames)")
    parser.add_argument("--frames-scale", type=float, default=None,
                        help="alternative to --episodes: scale of the default size (0.1 = ~100k frames)")
    parser.add_argument("--episodes-per-file", type=int, default=400,
                        help="episodes per LeRobot data file (default 400: ~30 MB parquet files)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="work folder (default: a new temp dir, deleted at the end unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (reused by a later run)")


def n_episodes(args) -> int:
    if args.frames_scale is not None:
        return max(1, round(DEFAULT_EPISODES * args.frames_scale))
    return args.episodes


class WorkDir:
    """The benchmark's work folder: a temp dir removed at exit unless --keep or --out-dir was given."""

    def __init__(self, args, prefix: str):
        if args.out_dir is not None:
            self.path = args.out_dir.expanduser().resolve()
            self.path.mkdir(parents=True, exist_ok=True)
            self.remove = False
        else:
            self.path = Path(tempfile.mkdtemp(prefix=prefix))
            self.remove = not args.keep

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc) -> None:
        if self.remove:
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            print(f"\n(work folder kept: {self.path})")


def build_dataset(work: Path, episodes: int, episodes_per_file: int, seed: int) -> tuple[Path, bool]:
    """Write (or reuse, if the same parameters were used before) the synthetic LeRobot v3.0 dataset.

    Returns (folder, reused)."""
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    src = work / "lerobot_dataset"
    params = {"episodes": episodes, "lengths": list(LENGTHS), "episodes_per_file": episodes_per_file, "seed": seed,
              "fps": FPS, "state_dim": STATE_DIM, "action_dim": ACTION_DIM}
    marker = work / "lerobot_dataset.params.json"
    if src.exists() and marker.exists() and json.loads(marker.read_text()) == params:
        print(f"reusing LeRobot dataset {src}")
        return src, True
    if src.exists():
        shutil.rmtree(src)
    t0 = time.perf_counter()
    write_sample_dataset(src, version="v3.0", n_episodes=episodes, lengths=LENGTHS, fps=FPS, seed=seed,
                         state_dim=STATE_DIM, action_dim=ACTION_DIM, episodes_per_file=episodes_per_file)
    marker.write_text(json.dumps(params))
    print(f"wrote LeRobot v3.0 dataset in {time.perf_counter() - t0:.1f} s: {src}")
    return src, False


# dataset shapes of the scale benchmarks: name -> (episodes, episode frames (lo, hi) inclusive, episodes per file)
SHAPES = {"2k": (2000, (300, 700), 400), "20k": (20000, (50, 50), 4000), "100k": (100000, (10, 30), 20000)}


def build_shape(work: Path, name: str, episodes: int, lengths: tuple[int, int], per_file: int, seed: int) -> Path:
    """Write (or reuse) a synthetic LeRobot v3.0 dataset of ``episodes`` episodes of ``lengths`` frames."""
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    src = work / f"src-{name}"
    params = {"episodes": episodes, "lengths": list(lengths), "per_file": per_file, "seed": seed}
    marker = work / f"src-{name}.json"
    if src.exists() and marker.exists() and json.loads(marker.read_text()) == params:
        return src
    shutil.rmtree(src, ignore_errors=True)
    t0 = time.perf_counter()
    write_sample_dataset(src, n_episodes=episodes, lengths=lengths, fps=FPS, seed=seed, state_dim=STATE_DIM,
                         action_dim=ACTION_DIM, episodes_per_file=per_file)
    marker.write_text(json.dumps(params))
    print(f"  wrote the LeRobot dataset ({episodes:,} episodes) in {time.perf_counter() - t0:.1f} s")
    return src


def parse_shapes(spec: str, episodes: int | None, episode_frames: str | None) -> dict[str, tuple]:
    """``--shapes 2k,20k`` or a custom ``--episodes N --episode-frames LO-HI``."""
    if episodes is not None:
        lo, _, hi = (episode_frames or "300-700").partition("-")
        return {f"{episodes}x{lo}-{hi or lo}": (episodes, (int(lo), int(hi or lo)), max(1, episodes // 5))}
    return {k: SHAPES[k] for k in spec.split(",") if k}


def allocated_bytes(path: Path) -> int:
    """Disk blocks allocated under ``path`` (sparse holes take none), in bytes."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def data_files(src: Path) -> list[Path]:
    return sorted((src / "data").glob("*/*.parquet"))


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def read_columns(files: list[Path], features=FEATURES) -> dict[str, np.ndarray]:
    """Read LeRobot data parquet files into one numpy array per feature (frames in global index order)."""
    parts: dict[str, list[np.ndarray]] = {k: [] for k in features}
    for f in files:
        table = pq.read_table(f, columns=list(features))
        for k in features:
            for chunk in table.column(k).chunks:
                if pa.types.is_fixed_size_list(chunk.type) or pa.types.is_list(chunk.type):
                    width = chunk.type.list_size if pa.types.is_fixed_size_list(chunk.type) else None
                    values = chunk.flatten().to_numpy(zero_copy_only=False)
                    parts[k].append(values.reshape(-1, width or len(values) // len(chunk)))
                else:
                    parts[k].append(chunk.to_numpy(zero_copy_only=False))
    return {k: np.ascontiguousarray(np.concatenate(v)) for k, v in parts.items()}


def read_episode_table(src: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(episode start, episode end, tasks) from meta/episodes/*.parquet and meta/tasks.parquet."""
    eps = pa.concat_tables([pq.read_table(f, columns=["episode_index", "dataset_from_index", "dataset_to_index"])
                            for f in sorted((src / "meta" / "episodes").glob("*/*.parquet"))])
    order = np.argsort(eps.column("episode_index").to_numpy())
    start = eps.column("dataset_from_index").to_numpy()[order].astype(np.int64)
    end = eps.column("dataset_to_index").to_numpy()[order].astype(np.int64)
    tasks_t = pq.read_table(src / "meta" / "tasks.parquet")
    by_index = dict(zip(tasks_t.column("task_index").to_pylist(), tasks_t.column("task").to_pylist(), strict=True))
    return start, end, [by_index[i] for i in range(len(by_index))]


# ------------------------------------------------------------------------------------------------ timing
def interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Run each fn ``repeats`` times, alternating between them (A B C A B C ...) so that noise from the other
    tenants of the VM hits every contender alike. Returns wall seconds per run."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def best(ts: list[float]) -> float:
    return min(ts)


def median(ts: list[float]) -> float:
    return statistics.median(ts)


# ------------------------------------------------------------------------------------------------ memory
def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS, RssAnon, RssFile, VmSize of a process in KiB, from /proc/<pid>/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmSize"):
                out[key] = int(rest.split()[0])
    return out


def drop_page_cache(folder: Path) -> None:
    """Evict the files under ``folder`` from the page cache (as after a reboot), where the OS allows it: files no
    process maps. Written pages go to disk first."""
    if not hasattr(os, "posix_fadvise"):
        return
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _block_stat(path: Path) -> Path | None:
    st = os.stat(path)
    stat = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat")
    return stat if stat.exists() else None  # tmpfs and friends have no block device


def settle_disk(path: Path, quiet_s: float = 1.0, timeout_s: float = 30.0) -> float:
    """Flush dirty pages, then wait until the block device holding ``path`` has done no write, discard or flush
    for ``quiet_s`` and has nothing in flight (ext4 here is mounted with ``discard``: deleting files or a
    journal commit keeps the disk busy for seconds after the writes). Untimed. Returns the seconds waited."""
    t0 = time.perf_counter()
    os.sync()
    stat = _block_stat(path)
    if stat is None:
        return 0.0

    def sample() -> tuple[tuple[int, ...], int]:
        # Documentation/block/stat.rst: [6] sectors written, [8] in flight, [13] sectors discarded, [15] flushes
        f = [int(x) for x in stat.read_text().split()] + [0] * 17
        return (f[6], f[13], f[15]), f[8]

    last, _ = sample()
    quiet_since = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        time.sleep(0.1)
        now, in_flight = sample()
        if now != last or in_flight:
            last, quiet_since = now, time.perf_counter()
        elif time.perf_counter() - quiet_since >= quiet_s:
            break
    return time.perf_counter() - t0


def run_watched(target: Callable, args: tuple, watch: Path, what: str, stall_s: float = 60.0,
                start_s: float = 300.0, attempts: int = 3) -> None:
    """Run ``target(*args)`` in a spawned child process, killed and started again if it fails or if the bytes
    under ``watch`` (a file or a folder) stop growing for ``stall_s`` (or stay 0 for ``start_s``). SVT-AV1 4.2.0
    (PyAV 19.0.2's wheel) deadlocked or emitted a packet the muxer refused in 3 of 12 camera encodes when two
    encoders ran at once on a 2-core VM, in none of 10 run one at a time: encode one file at a time with this."""
    import multiprocessing as mp

    def size() -> int:
        if watch.is_dir():
            return dir_bytes(watch)
        return watch.stat().st_size if watch.exists() else 0

    ctx = mp.get_context("spawn")
    for attempt in range(1, attempts + 1):
        proc = ctx.Process(target=target, args=args, daemon=True)
        proc.start()
        last, changed, why = size(), time.monotonic(), ""
        while proc.is_alive():
            proc.join(0.5)
            now = size()
            if now != last:
                last, changed = now, time.monotonic()
            elif proc.is_alive() and time.monotonic() - changed > (stall_s if last else start_s):
                why = f"no output for {stall_s if last else start_s:.0f} s, at {last:,} bytes"
                proc.kill()
                proc.join()
        if proc.exitcode == 0:
            return
        why = why or f"exit code {proc.exitcode}"
        if attempt == attempts:
            raise RuntimeError(f"{what} failed {attempts} times (last: {why})")
        print(f"({what} failed: {why}; starting it again)", flush=True)


def python_exe() -> str:
    return sys.executable


def scene_frames(rng: np.random.Generator, length: int, shape: tuple[int, int, int] = (480, 640, 3)
                 ) -> np.ndarray:
    """Camera-like synthetic frames for the camera benchmarks: a textured table seen by a slowly panning camera,
    with coloured objects (a 'gripper' and two blocks) moving over it, lit by a soft gradient, plus a little
    sensor noise (float32, each object drawn inside its box)."""
    h, w, _ = shape
    big = rng.normal(0, 1, (h // 8 + 8, w // 8 + 16, 3))
    texture = np.kron(big, np.ones((8, 8, 1)))  # blocky noise, then blurred into wood-like grain
    for axis in (0, 1):
        for _ in range(3):
            texture = (texture + np.roll(texture, 3, axis) + np.roll(texture, -3, axis)) / 3
    base = (np.array([150, 110, 70]) + 25 * texture / texture.std()).astype(np.float32)
    y, x = np.mgrid[0:h, 0:w]
    light = (0.75 + 0.25 * np.cos((x - w / 2) / w * 2.2) * np.cos((y - h / 2) / h * 1.8))[..., None].astype(np.float32)
    objects = [(rng.uniform(0.2, 0.8, 2), rng.uniform(-1, 1, 2), rng.integers(30, 230, 3).astype(np.float32), r)
               for r in (60, 35, 28)]
    out = np.empty((length, h, w, 3), np.uint8)
    img = np.empty((h, w, 3), np.float32)
    for t in range(length):
        pan = int(8 * np.sin(t / 40))
        np.multiply(base[4 + pan // 2: 4 + pan // 2 + h, 8 + pan: 8 + pan + w], light, out=img)
        for k, (p0, v, colour, r) in enumerate(objects):
            cy = h * (p0[0] + 0.25 * np.sin(t / (25 + 7 * k) + v[0]))
            cx = w * (p0[1] + 0.25 * np.cos(t / (31 + 5 * k) + v[1]))
            ry, rx = (r * 1.6, r * 0.7) if k == 0 else (r, r)
            y0, y1 = max(0, int(cy - ry) - 1), min(h, int(cy + ry) + 2)
            x0, x1 = max(0, int(cx - rx) - 1), min(w, int(cx + rx) + 2)
            if y0 >= y1 or x0 >= x1:
                continue
            yy, xx, patch = y[y0:y1, x0:x1], x[y0:y1, x0:x1], img[y0:y1, x0:x1]
            if k == 0:  # a rectangle with a darker rim
                mask = (np.abs(yy - cy) < ry) & (np.abs(xx - cx) < rx)
                rim = mask & ~((np.abs(yy - cy) < ry - 6) & (np.abs(xx - cx) < rx - 6))
                patch[mask] = colour
                patch[rim] = colour * 0.5
            else:
                d = (yy - cy) ** 2 + (xx - cx) ** 2
                inside = d < r * r
                patch[inside] = colour * (1.1 - 0.4 * np.sqrt(d[inside]) / r)[:, None]
        img += rng.standard_normal(img.shape, dtype=np.float32) * 2.0
        np.clip(img, 0, 255, out=img)
        out[t] = img
    return out
