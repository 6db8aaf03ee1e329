"""Writing in place: ``lerobot_zarr.create`` / ``add_episode`` / ``edit`` / ring buffer / sampling while appending,
each against a raw numpy baseline measured in the same run on the same filesystem.

1. Append of one 500-frame episode (``observation.state``/``action`` f32[14] + ``observation.images.cam``
   uint8[96,96,3], plus LeRobot's 5 index columns the writer fills: 8 chunk files, 13.9 MB) with ``durable=True``
   and ``durable=False``, vs ``ndarray.tofile`` of the same 8 arrays (one file per feature, fresh files in a fresh
   folder of the same filesystem) and vs tofile + ``os.fsync`` of each file. Contenders interleaved; before every
   timed operation ``os.sync()`` and a short wait for the disk to be idle (untimed), so that no contender pays for
   another's dirty pages (a durable commit calls ``syncfs``, which would). Breakdown of one append, measured from
   outside: an append to a store without the camera, ``lerobot_v3.episode_stats`` of the camera and of the numeric
   features, and a cProfile of a few appends split by library function (profiler overhead included).
2. In-place edits vs a raw ``np.memmap(mode="r+")`` write + ``flush()`` of the same bytes in files of the same
   sizes: (a) one large edit (the whole ``action`` of a 500-frame episode + the camera of 100 frames); (b) 200
   single-row edits of ``action``, each its own ``with ds.edit(e, frames=slice(i, i + 1))``,
   vs a memmap opened, written and flushed per row; (c) the same 200 row writes inside one ``with ds.edit(e)``
   block vs one memmap, 200 row writes, one flush.
3. Ring buffer (``capacity_frames=20_000``, ``durable=False``, state/action only): 100 appends of 500 frames;
   the first 40 fill it, every later one evicts the oldest episode. Median of the last 20 appends / first 20,
   and / the same appends into an unbounded store (interleaved, isolates the eviction from the table size).
4. Sampling while appending (200 episodes of 500 frames, state/action, the windows of ``bench_sampling.py``):
   steady ``get_batch(256 random indices)`` samples/s, and the first ``get_batch`` right after an append (the
   writer reloads the new commit and remaps episodes lazily) as a ratio; also a separate reader's ``refresh()``.

Everything is written under a temp folder on the checkout's filesystem (``--tmp-parent``; not /tmp, which may be
tmpfs), whose device, type and mount options are printed. Figures are medians; nothing asserts a timing (only the
read-back correctness checks raise).

Run (from the repository root):  .venv/bin/python benchmarks/bench_write.py [--quick]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))  # the checkout, so that no PYTHONPATH is needed
import _common as C

import lerobot_zarr
from lerobot_zarr.lerobot.format import DEFAULT_FEATURES, episode_stats

FPS = C.FPS
DIM = 14
FRAMES = 500
CAM = (96, 96, 3)
CAM_KEY = "observation.images.cam"
BATCH = 256
RING_CAPACITY = 20_000
RING_APPENDS = 100
SAMPLING_EPISODES = 200
TARGET_APPEND = 3.0  # append / raw write <= 3x
TARGET_EDIT = 1.5  # edit / raw memmap write <= 1.5x

FEATURES_CAM = {
    "observation.state": {"dtype": "float32", "shape": [DIM]},
    "action": {"dtype": "float32", "shape": [DIM]},
    CAM_KEY: {"dtype": "image", "shape": list(CAM)},
}
FEATURES_NOCAM = {k: v for k, v in FEATURES_CAM.items() if k != CAM_KEY}


# Library functions the cProfile breakdowns look for (label, file, function); rows for functions that no longer
# exist print as "-" or are left out, so the script keeps working while the library is refactored.
APPEND_SPEC = [
    ("validate + convert the input (_frames_of)", "writer.py", "_frames_of"),
    ("rows into the packs (_packs.write_rows)", "packs.py", "write_rows"),
    ("new pack files (_packs.ensure_pack)", "packs.py", "ensure_pack"),
    ("per-episode stats (lerobot_v3.episode_stats)", "lerobot_v3.py", "episode_stats"),
    ("per-episode stats file (_write_stats_file)", "writer.py", "_write_stats_file"),
    ("dataset stats merge (_dataset_stats)", "writer.py", "_dataset_stats"),
    ("commit, whole (store.commit)", "committing.py", "commit"),
    ("zarr metadata copies (store._write_zarr_copies)", "committing.py", "_write_zarr_copies"),
    ("metadata documents (_zarr_meta.metadata_documents)", "zarr_meta.py", "metadata_documents"),
    ("frame_live flags (store._set_live)", "committing.py", "_set_live"),
    ("syncfs before the root write (flush_filesystem)", "_fileio.py", "flush_filesystem"),
    ("small files written atomically (atomic_write)", "_fileio.py", "atomic_write"),
    ("fsync of folders (_fileio._fsync_dir)", "_fileio.py", "_fsync_dir"),
    ("sampler reload (LeRobotZarrDataset._load)", "dataset.py", "_load"),
    ("retire evicted packs (_packs.retire_pack)", "packs.py", "retire_pack"),
]
EDIT_SPEC = [
    ("map the episode's rows (np.memmap.__new__)", "memmap.py", "__new__"),
    ("msync of the maps (np.memmap.flush)", "memmap.py", "flush"),
    ("per-episode stats of every feature (episode_stats)", "lerobot_v3.py", "episode_stats"),
    ("per-episode stats file (_write_stats_file)", "writer.py", "_write_stats_file"),
    ("dataset stats merge (_dataset_stats)", "writer.py", "_dataset_stats"),
    ("commit, whole (store.commit)", "committing.py", "commit"),
    ("zarr metadata copies (store._write_zarr_copies)", "committing.py", "_write_zarr_copies"),
    ("metadata documents (_zarr_meta.metadata_documents)", "zarr_meta.py", "metadata_documents"),
    ("syncfs before the root write (flush_filesystem)", "_fileio.py", "flush_filesystem"),
    ("small files written atomically (atomic_write)", "_fileio.py", "atomic_write"),
    ("fsync of folders (_fileio._fsync_dir)", "_fileio.py", "_fsync_dir"),
    ("sampler reload (LeRobotZarrDataset._load)", "dataset.py", "_load"),
]


def delta_timestamps() -> dict[str, list[float]]:
    return {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(16)]}


# ------------------------------------------------------------------------------------------------ helpers
def filesystem_of(path: Path) -> tuple[str, str, str, str]:
    """(mount point, device, fs type, options) of the mount holding ``path``, from /proc/mounts."""
    real = os.path.realpath(path)
    found = ("?", "?", "?", "?")
    best_len = -1
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype, opts = line.split()[:4]
                mnt = mnt.replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= best_len:
                    found, best_len = (mnt, dev, fstype, opts), len(mnt)
    except OSError:
        pass
    return found


class WriteWorkDir(C.WorkDir):
    """C.WorkDir, but the default temp folder is made under ``parent`` (a real disk) rather than in /tmp."""

    def __init__(self, args, prefix: str, parent: Path):
        if args.out_dir is not None:
            super().__init__(args, prefix)
            self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.path))  # fresh stores every run
        else:
            parent.mkdir(parents=True, exist_ok=True)
            self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
            self.remove = not args.keep


def episode_arrays(rng: np.random.Generator, camera: bool) -> dict[str, np.ndarray]:
    ep = {"observation.state": rng.standard_normal((FRAMES, DIM), dtype=np.float32),
          "action": rng.standard_normal((FRAMES, DIM), dtype=np.float32)}
    if camera:
        ep[CAM_KEY] = rng.integers(0, 256, (FRAMES, *CAM), dtype=np.uint8)
    return ep


def stored_arrays(ep: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every array an append of ``ep`` writes: the user features and LeRobot's 5 columns the writer fills."""
    n = len(next(iter(ep.values())))
    out = dict(ep)
    out.update(timestamp=(np.arange(n) / FPS).astype(np.float32), frame_index=np.arange(n, dtype=np.int64),
               episode_index=np.zeros(n, dtype=np.int64), index=np.arange(n, dtype=np.int64),
               task_index=np.zeros(n, dtype=np.int64))
    assert set(out) >= set(DEFAULT_FEATURES)
    return out


def tofile_all(arrays: dict[str, np.ndarray], folder: Path, fsync: bool) -> None:
    folder.mkdir(parents=True)
    for name, arr in arrays.items():
        if fsync:
            with open(folder / f"{name}.bin", "wb") as f:
                arr.tofile(f)
                f.flush()
                os.fsync(f.fileno())
        else:
            arr.tofile(folder / f"{name}.bin")


def settle(work: Path, args) -> float:
    """os.sync(), then wait (at most --idle-timeout s) for the disk to be idle for --idle-s: other tenants write to
    this disk too, so it may never be; what matters is that our own dirty pages are flushed. Untimed."""
    return C.settle_disk(work, quiet_s=args.idle_s, timeout_s=args.idle_timeout)


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def med_ms(ts: list[float]) -> float:
    return C.median(ts) * 1e3


def target_note(ratio: float, target: float) -> str:
    return f"(target <= {target:g}x: {'met' if ratio <= target else 'MISSED'})"


def profile_components(prof: cProfile.Profile, spec: list[tuple[str, str, str]]) -> dict[str, float | None]:
    """Cumulative seconds (callees included) spent in functions, by (label, file suffix, function name), summed
    over every frame and thread that matches; None where no such function ran (the library changed)."""
    st = pstats.Stats(prof).stats  # {(file, line, func): (cc, nc, tt, ct, callers)}
    out: dict[str, float | None] = {}
    for label, file_suffix, func in spec:
        hits = [v[3] for (fname, _, fn), v in st.items() if fn == func and fname.endswith(file_suffix)]
        out[label] = sum(hits) if hits else None
    out["_threads"] = any(fn == "_worker" and fname.endswith("thread.py") for fname, _, fn in st)
    return out


def profile_ops(ops: list[Callable[[], object]], before: Callable[[], object] | None = None
                ) -> tuple[dict, float, int]:
    """cProfile ``ops`` (``before`` runs unprofiled and untimed ahead of each); returns (profiler, wall s, n)."""
    prof = cProfile.Profile()
    total = 0.0
    for op in ops:
        if before is not None:
            before()
        t0 = time.perf_counter()
        prof.enable()
        op()
        prof.disable()
        total += time.perf_counter() - t0
    return prof, total, len(ops)


def print_breakdown(title: str, columns: dict[str, tuple[dict, float, int]], spec: list[tuple[str, str, str]]) -> None:
    """columns: name -> (profile_components(...), total wall seconds while profiled, operations)."""
    print(title)
    print(f"    {'':<56}" + "".join(f"{name:>22}" for name in columns))
    for label, _, _ in spec:
        if all(comp[label] is None for comp, _, _ in columns.values()):
            continue
        cells = ["-" if comp[label] is None else f"{comp[label] / n * 1e3:8.2f} ms {comp[label] / total * 100:5.1f} %"
                 for comp, total, n in columns.values()]
        print(f"    {label:<56}" + "".join(f"{c:>22}" for c in cells))
    cells = [f"{total / n * 1e3:8.2f} ms  100.0 %" for _, total, n in columns.values()]
    print(f"    {'wall time per operation (under the profiler)':<56}" + "".join(f"{c:>22}" for c in cells))
    notes = [("rows include their callees and can overlap (atomic_write runs inside the stats-file, metadata-copy "
              "and commit rows; the syncfs inside the commit)")]
    if any(comp["_threads"] for comp, _, _ in columns.values()):
        notes.append("the library ran some of this on worker threads, concurrently with the main thread: rows can "
                     "add up past 100 %")
    print("      (" + "; ".join(notes) + ")")


# ------------------------------------------------------------------------------------------------ 1. append
def bench_append(work: Path, args, rng: np.random.Generator) -> dict:
    print(f"\n== 1. append one {FRAMES}-frame episode ==", flush=True)
    ep = episode_arrays(rng, camera=True)
    ep_nocam = {k: v for k, v in ep.items() if k != CAM_KEY}
    arrays = stored_arrays(ep)
    nbytes = sum(a.nbytes for a in arrays.values())
    nbytes_nocam = sum(a.nbytes for k, a in arrays.items() if k != CAM_KEY)
    stores = {
        "cam_durable": lerobot_zarr.create(work / "append_durable", fps=FPS, features=FEATURES_CAM, durable=True),
        "cam_fast": lerobot_zarr.create(work / "append_fast", fps=FPS, features=FEATURES_CAM, durable=False),
        "nocam_durable": lerobot_zarr.create(work / "append_nocam_durable", fps=FPS, features=FEATURES_NOCAM,
                                             durable=True),
        "nocam_fast": lerobot_zarr.create(work / "append_nocam_fast", fps=FPS, features=FEATURES_NOCAM,
                                          durable=False),
    }
    raw = work / "raw"
    counter = iter(range(10**9))
    raw_folders: list[Path] = []

    def raw_write(fsync: bool) -> None:
        folder = raw / f"{'fsync' if fsync else 'tofile'}-{next(counter)}"
        raw_folders.append(folder)
        tofile_all(arrays, folder, fsync)

    def cam_only() -> None:
        folder = raw / f"cam-{next(counter)}"
        folder.mkdir()
        arrays[CAM_KEY].tofile(folder / f"{CAM_KEY}.bin")

    contenders: dict[str, Callable[[], object]] = {
        "add_episode, durable=True": lambda: stores["cam_durable"].add_episode(ep, task="pick"),
        "add_episode, durable=False": lambda: stores["cam_fast"].add_episode(ep, task="pick"),
        "tofile, 8 files": lambda: raw_write(False),
        "tofile + os.fsync each file": lambda: raw_write(True),
        "add_episode, no camera, durable=True": lambda: stores["nocam_durable"].add_episode(ep_nocam, task="pick"),
        "add_episode, no camera, durable=False": lambda: stores["nocam_fast"].add_episode(ep_nocam, task="pick"),
        "tofile, camera file only": cam_only,
    }
    raw.mkdir()
    for fn in contenders.values():  # warm-up: first chunk folders, imports, page-cache of the inputs
        fn()
    times: dict[str, list[float]] = {k: [] for k in contenders}
    waited = []
    for _ in range(args.repeats):
        for name, fn in contenders.items():
            waited.append(settle(work, args))
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)

    # correctness: the last appended episode reads back as written
    ds = stores["cam_fast"]
    last = ds.num_episodes - 1
    frame0 = int(ds.meta.episode_length[:last].sum())
    got = ds.get_batch(np.arange(frame0, frame0 + FRAMES))
    for k, v in ep.items():
        if not np.array_equal(got[k], v):
            raise AssertionError(f"appended episode {last}: {k} differs from what was written")

    # breakdown from outside: stats alone (CPU only, no disk)
    def stats_of(names):
        return lambda: [episode_stats(arrays[k], "image" if k == CAM_KEY else "numeric") for k in names]

    numeric = [k for k in arrays if k != CAM_KEY]
    stat_times = C.interleaved({"camera": stats_of([CAM_KEY]), "numeric": stats_of(numeric)},
                               max(args.repeats, 9))
    # breakdown: cProfile of a few appends per durability, split by library function
    spec = APPEND_SPEC
    columns = {}
    for key, label in (("cam_durable", "durable=True"), ("cam_fast", "durable=False")):
        def op(ds=stores[key]) -> None:
            ds.add_episode(ep, task="pick")
        prof, total, n = profile_ops([op] * args.profile_ops,
                                     lambda: settle(work, args))
        columns[label] = (profile_components(prof, spec), total, n)
    for s in stores.values():
        s.close()
    return {"times": times, "nbytes": nbytes, "nbytes_nocam": nbytes_nocam, "waited": waited,
            "stat_times": stat_times, "profile": columns, "spec": spec,
            "raw_file": raw_folders[0], "ep": ep}


def report_append(r: dict, args) -> None:
    times, nbytes = r["times"], r["nbytes"]
    mb = nbytes / 1e6
    print(f"\n1. Append one episode: {FRAMES} frames, {mb:.1f} MB in 8 chunk files (state/action f32[14], camera "
          f"u8[96,96,3], 5 LeRobot columns); no camera: {r['nbytes_nocam'] / 1e3:.0f} kB in 7 files.")
    print(f"   median of {args.repeats} interleaved rounds; before each run, os.sync() + wait for the disk to be idle "
          f"{args.idle_s:g} s, at most {args.idle_timeout:g} s (untimed, median wait {C.median(r['waited']):.2f} s)")
    print(f"   {'':<42}{'median ms':>11}{'min ms':>9}{'max ms':>9}{'MB/s':>8}")
    for name, ts in times.items():
        size = (r["nbytes_nocam"] if "no camera" in name else
                r["nbytes"] - r["nbytes_nocam"] if "camera file only" in name else nbytes)
        print(f"   {name:<42}{med_ms(ts):>11.1f}{min(ts) * 1e3:>9.1f}{max(ts) * 1e3:>9.1f}"
              f"{size / 1e6 / C.median(ts):>8.0f}")
    dur = C.median(times["add_episode, durable=True"])
    fast = C.median(times["add_episode, durable=False"])
    print(f"   ratios{'of medians':>45}{'of bests':>10}{'median of per-round':>21}")

    def ratio_line(label: str, num: str, den: str, like: str | None = None) -> None:
        x, y = times[num], times[den]
        med = C.median(x) / C.median(y)
        per_round = C.median([a / b for a, b in zip(x, y, strict=True)])
        note = "" if like is None else f"   {target_note(med, TARGET_APPEND)}{like}"
        print(f"     {label:<40}{med:>6.2f}x{min(x) / min(y):>9.2f}x{per_round:>20.2f}x{note}")

    ratio_line("append durable=False / tofile", "add_episode, durable=False", "tofile, 8 files",
               "  <- like for like (no flush)")
    ratio_line("append durable=True  / (tofile + fsync)", "add_episode, durable=True", "tofile + os.fsync each file",
               "  <- like for like (on disk)")
    ratio_line("append durable=True  / tofile", "add_episode, durable=True", "tofile, 8 files", "")
    ratio_line("append durable=False / (tofile + fsync)", "add_episode, durable=False", "tofile + os.fsync each file")
    nocam_fast = C.median(times["add_episode, no camera, durable=False"])
    nocam_dur = C.median(times["add_episode, no camera, durable=True"])
    cam_stats = C.median(r["stat_times"]["camera"])
    num_stats = C.median(r["stat_times"]["numeric"])
    cam_tofile = C.median(times["tofile, camera file only"])
    print(f"   where the time of one append goes, measured from outside (medians, ms){'durable=False':>19}"
          f"{'durable=True':>14}")
    rows = [("append without the camera (7 small chunks, their stats, the commit)", nocam_fast, nocam_dur),
            ("append - append without the camera (what the camera adds)", fast - nocam_fast, dur - nocam_dur),
            ("  compare: tofile of the camera file alone (row above)", cam_tofile, cam_tofile),
            ("  compare: episode_stats of the camera alone (image_stats)", cam_stats, cam_stats),
            ("episode_stats of the 7 numeric features (in the no-camera append)", num_stats, num_stats)]
    for label, x, y in rows:
        print(f"     {label:<71}{x * 1e3:>16.1f}{y * 1e3:>14.1f}")
    print_breakdown(f"   cProfile of {args.profile_ops} more appends per store (os.sync() + idle wait before each), ms "
                    f"per append in each library function and share of the wall time (profiler overhead included):",
                    r["profile"], r["spec"])


# ------------------------------------------------------------------------------------------------ 2. edits
def bench_edit(work: Path, args, rng: np.random.Generator, append: dict) -> dict:
    print("\n== 2. in-place edits ==", flush=True)
    stores = {
        "durable=True": lerobot_zarr.WritableDataset(work / "append_durable", durable=True),
        "durable=False": lerobot_zarr.WritableDataset(work / "append_fast", durable=False),
    }
    nocam = lerobot_zarr.WritableDataset(work / "append_nocam_fast", durable=False)
    raw_folder: Path = append["raw_file"]
    raw_action, raw_cam = raw_folder / "action.bin", raw_folder / f"{CAM_KEY}.bin"
    E = 0
    n_cam = 100
    values = [episode_arrays(rng, camera=True) for _ in range(2)]
    flip = iter(range(10**9))

    last_written: dict[int, dict[str, np.ndarray]] = {}

    def big_edit(ds) -> Callable[[], None]:
        def run() -> None:
            v = last_written[id(ds)] = values[next(flip) % 2]
            with ds.edit(E) as m:
                m["action"][:] = v["action"]
                m[CAM_KEY][:n_cam] = v[CAM_KEY][:n_cam]
        return run

    def big_raw() -> None:
        v = values[next(flip) % 2]
        a = np.memmap(raw_action, dtype=np.float32, mode="r+", shape=(FRAMES, DIM))
        c = np.memmap(raw_cam, dtype=np.uint8, mode="r+", shape=(FRAMES, *CAM))
        a[:] = v["action"]
        c[:n_cam] = v[CAM_KEY][:n_cam]
        a.flush()
        c.flush()
        del a, c

    def big_edit_flush(ds) -> Callable[[], None]:
        edit = big_edit(ds)

        def run() -> None:
            edit()
            ds.flush()  # the stats of the edit, committed
        return run

    big = {f"edit, {k}": big_edit(ds) for k, ds in stores.items()}
    big["edit + flush() (stats commit), durable=False"] = big_edit_flush(stores["durable=False"])
    big["raw np.memmap r+ write + flush"] = big_raw
    for fn in big.values():
        fn()
    big_times: dict[str, list[float]] = {k: [] for k in big}
    for _ in range(args.repeats):
        for name, fn in big.items():
            os.sync()
            t0 = time.perf_counter()
            fn()
            big_times[name].append(time.perf_counter() - t0)
    # correctness: the last large edit is what every reader sees (other process's view = our maps)
    for ds in stores.values():
        last_values = last_written[id(ds)]
        got = ds.get_batch(np.arange(0, FRAMES))
        if not (np.array_equal(got["action"], last_values["action"])
                and np.array_equal(got[CAM_KEY][:n_cam], last_values[CAM_KEY][:n_cam])):
            raise AssertionError("large edit not visible through get_batch")

    # (b) many small edits, each its own with-block, vs memmap open + write row + flush per row
    rows = rng.standard_normal((args.small_edits, DIM), dtype=np.float32)

    def small_edit(ds) -> Callable[[int], None]:
        def run(i: int) -> None:
            with ds.edit(E, frames=slice(i, i + 1)) as m:
                m["action"][:] = rows[i]
        return run

    def small_raw(i: int) -> None:
        a = np.memmap(raw_action, dtype=np.float32, mode="r+", shape=(FRAMES, DIM))
        a[i] = rows[i]
        a.flush()
        del a

    small = {f"edit, {k}": small_edit(ds) for k, ds in stores.items()}
    small["edit, no-camera store, durable=False"] = small_edit(nocam)
    small["raw np.memmap open + write row + flush"] = small_raw
    for fn in small.values():
        fn(0)
    os.sync()
    small_times: dict[str, list[float]] = {k: [] for k in small}
    for i in range(args.small_edits):  # interleaved per row
        for name, fn in small.items():
            t0 = time.perf_counter()
            fn(i)
            small_times[name].append(time.perf_counter() - t0)
    for ds in (*stores.values(), nocam):
        got = ds.get_batch(np.arange(0, args.small_edits))["action"]
        if not np.array_equal(got, rows):
            raise AssertionError("small edits not visible through get_batch")

    # (c) the same row writes inside one with-block vs one memmap, the writes, one flush
    def block_edit(ds) -> Callable[[], None]:
        def run() -> None:
            with ds.edit(E) as m:
                act = m["action"]
                for i in range(args.small_edits):
                    act[i] = rows[i]
        return run

    def block_raw() -> None:
        a = np.memmap(raw_action, dtype=np.float32, mode="r+", shape=(FRAMES, DIM))
        for i in range(args.small_edits):
            a[i] = rows[i]
        a.flush()
        del a

    block = {f"edit, {k}": block_edit(ds) for k, ds in stores.items()}
    block["edit, no-camera store, durable=False"] = block_edit(nocam)
    block["raw np.memmap, the writes, one flush"] = block_raw
    for fn in block.values():
        fn()
    block_times: dict[str, list[float]] = {k: [] for k in block}
    for _ in range(args.repeats):
        for name, fn in block.items():
            os.sync()
            t0 = time.perf_counter()
            fn()
            block_times[name].append(time.perf_counter() - t0)

    # breakdown of a small edit: cProfile, split by library function
    spec = EDIT_SPEC
    columns = {}
    n_prof = min(args.profile_ops * 4, args.small_edits)
    for label, ds in (*stores.items(), ("no camera, d=False", nocam)):
        fn = small_edit(ds)
        prof, total, n = profile_ops([lambda i=i, fn=fn: fn(i) for i in range(n_prof)])
        columns[label] = (profile_components(prof, spec), total, n)
    for ds in (*stores.values(), nocam):
        ds.close()
    return {"big": big_times, "small": small_times, "block": block_times, "profile": columns, "spec": spec,
            "n_prof": n_prof, "cam_mb": n_cam * int(np.prod(CAM)) / 1e6}


def report_edit(r: dict, args) -> None:
    print(f"\n2. In-place edits of episode 0 ({FRAMES} frames) of the stores of part 1, vs np.memmap(mode='r+') of "
          f"files of the same sizes (tofile'd in part 1)")
    big = r["big"]
    raw = C.median(big["raw np.memmap r+ write + flush"])
    print(f"  (a) large edit: the whole action (28 kB) + the camera of 100 frames ({r['cam_mb']:.2f} MB); median of "
          f"{args.repeats}, os.sync() before each")
    print(f"   {'':<44}{'median ms':>11}{'min ms':>9}{'x raw':>8}")
    for name, ts in big.items():
        print(f"   {name:<44}{med_ms(ts):>11.2f}{min(ts) * 1e3:>9.2f}{C.median(ts) / raw:>7.2f}x")
    for k in ("durable=True", "durable=False"):
        ratio = C.median(big[f"edit, {k}"]) / raw
        print(f"     large edit, {k:<14} / raw memmap   {ratio:6.2f}x  {target_note(ratio, TARGET_EDIT)}")
    ratio = C.median(big["edit + flush() (stats commit), durable=False"]) / raw
    print(f"     large edit + flush() (its stats recomputed and committed) / raw memmap   {ratio:6.2f}x  (the "
          f"stats of edits are committed at flush()/close()/the next change, once for any number of edits)")

    small = r["small"]
    n = args.small_edits
    raw_s = C.median(small["raw np.memmap open + write row + flush"])
    print(f"  (b) {n} single-row edits of action (56 B), each its own `with ds.edit(0, frames=slice(i, i+1))`; "
          f"per-edit ms, interleaved row by row")
    print(f"   {'':<44}{'median ms':>11}{'p10 ms':>9}{'p90 ms':>9}{'total s':>9}{'x raw':>8}")
    for name, ts in small.items():
        p10, p90 = np.percentile(ts, [10, 90]) * 1e3
        print(f"   {name:<44}{med_ms(ts):>11.2f}{p10:>9.2f}{p90:>9.2f}{sum(ts):>9.2f}{C.median(ts) / raw_s:>7.2f}x")
    small_ratios = {}
    for k in ("durable=True", "durable=False", "no-camera store, durable=False"):
        ratio = C.median(small[f"edit, {k}"]) / raw_s
        small_ratios[k] = ratio
        print(f"     small edit, {k:<32} / raw memmap   {ratio:6.2f}x  {target_note(ratio, TARGET_EDIT)}")

    block = r["block"]
    raw_b = C.median(block["raw np.memmap, the writes, one flush"])
    print(f"  (c) the same {n} row writes inside ONE `with ds.edit(0)` block; median of {args.repeats}")
    print(f"   {'':<44}{'median ms':>11}{'us / row':>10}{'x raw':>8}{'vs (b) total':>14}")
    for name, ts in block.items():
        key = name if name in small else "raw np.memmap open + write row + flush"
        per_edit_total = C.median(small[key]) * n
        print(f"   {name:<44}{med_ms(ts):>11.2f}{C.median(ts) / n * 1e6:>10.1f}{C.median(ts) / raw_b:>7.2f}x"
              f"{per_edit_total / C.median(ts):>12.0f}x faster")
    for k in ("durable=True", "durable=False"):
        ratio = C.median(block[f"edit, {k}"]) / raw_b
        print(f"     one block of {n} writes, {k:<14} / raw memmap   {ratio:6.2f}x  {target_note(ratio, TARGET_EDIT)}")

    print_breakdown(f"   cProfile of {r['n_prof']} more single-row edits per store, ms per edit in each library "
                    f"function and share of the wall time (profiler overhead included):", r["profile"], r["spec"])
    worst = max(small_ratios.values())
    if worst > TARGET_EDIT:
        per_edit = {k: C.median(small[f"edit, {k}"]) * 1e3 for k in ("durable=True", "durable=False")}
        amort = C.median(small["edit, durable=False"]) * n / C.median(block["edit, durable=False"])
        print(f"\n   NOTE: SMALL EDITS MISS THE {TARGET_EDIT:g}x TARGET: {per_edit['durable=True']:.2f} ms (durable) / "
              f"{per_edit['durable=False']:.2f} ms (not durable) per edit vs {raw_s * 1e3:.2f} ms for a raw memmap "
              f"row write + flush ({worst:.1f}x at worst). Doing the writes inside one block amortises the per-block "
              f"cost: {n} writes in one block cost {amort:.0f}x less than {n} separate edits (durable=False).")


# ------------------------------------------------------------------------------------------------ 3. ring buffer
def bench_ring(work: Path, args, rng: np.random.Generator) -> dict:
    print("\n== 3. ring buffer ==", flush=True)
    ep = episode_arrays(rng, camera=False)
    ring_t = np.zeros((args.ring_runs, RING_APPENDS))
    flat_t = np.zeros((args.ring_runs, RING_APPENDS))
    first_evict = []
    for run in range(args.ring_runs):
        ring = lerobot_zarr.create(work / f"ring-{run}", fps=FPS, features=FEATURES_NOCAM,
                                   capacity_frames=RING_CAPACITY, durable=False)
        flat = lerobot_zarr.create(work / f"unbounded-{run}", fps=FPS, features=FEATURES_NOCAM, durable=False)
        os.sync()
        evicted_at = None
        for k in range(RING_APPENDS):
            t0 = time.perf_counter()
            ring.add_episode(ep, task="pick")
            ring_t[run, k] = time.perf_counter() - t0
            t0 = time.perf_counter()
            flat.add_episode(ep, task="pick")
            flat_t[run, k] = time.perf_counter() - t0
            if evicted_at is None and ring.num_episodes < k + 1:
                evicted_at = k
        first_evict.append(evicted_at)
        if len(ring) != RING_CAPACITY or ring.num_episodes != RING_CAPACITY // FRAMES:
            raise AssertionError(f"ring buffer holds {len(ring)} frames in {ring.num_episodes} episodes")
        if not np.array_equal(ring.get_batch(np.arange(len(ring) - FRAMES, len(ring)))["action"], ep["action"]):
            raise AssertionError("ring buffer: the last episode reads back wrong")
        ring.close()
        flat.close()
    return {"ring": ring_t, "flat": flat_t, "first_evict": first_evict}


def report_ring(r: dict, args) -> None:
    ring, flat = r["ring"], r["flat"]
    per = RING_CAPACITY // FRAMES
    print(f"\n3. Ring buffer: capacity_frames={RING_CAPACITY:,}, durable=False, {RING_APPENDS} appends of {FRAMES} "
          f"frames (state/action, 7 files, 65 kB); the first eviction happened at append "
          f"{[e + 1 if e is not None else None for e in r['first_evict']]} (the buffer holds {per} episodes); "
          f"{args.ring_runs} run(s), interleaved with appends to an unbounded store; medians over runs, ms")
    print(f"   {'appends':<14}{'ring':>9}{'unbounded':>11}{'ring/unb.':>11}")
    for a in range(0, RING_APPENDS, 20):
        rm, fm = np.median(ring[:, a:a + 20]) * 1e3, np.median(flat[:, a:a + 20]) * 1e3
        print(f"   {f'{a + 1}-{a + 20}':<14}{rm:>9.2f}{fm:>11.2f}{rm / fm:>10.2f}x")
    last, first = np.median(ring[:, -20:]), np.median(ring[:, :20])
    print(f"   ring: last 20 (each evicts one episode) / first 20 (no eviction)   {last / first:6.2f}x")
    print(f"   last 20: ring / unbounded store (same appends without eviction)   "
          f"{last / np.median(flat[:, -20:]):6.2f}x")


# ------------------------------------------------------------------------------------------------ 4. sampling
def bench_sampling(work: Path, args, rng: np.random.Generator) -> dict:
    print("\n== 4. sampling while appending ==", flush=True)
    root = work / "sampling"
    ep = episode_arrays(rng, camera=False)
    t0 = time.perf_counter()
    with lerobot_zarr.create(root, fps=FPS, features=FEATURES_NOCAM, durable=False) as w:
        for _ in range(SAMPLING_EPISODES):
            w.add_episode(ep, task="pick")
    build_s = time.perf_counter() - t0
    ds = lerobot_zarr.WritableDataset(root, delta_timestamps=delta_timestamps(), durable=False)
    reader = lerobot_zarr.LeRobotZarrDataset(root, delta_timestamps=delta_timestamps())
    for d in (ds, reader):  # map every episode
        for _ in range(5):
            d.get_batch(rng.integers(0, len(d), BATCH))
        d.get_batch(np.arange(0, len(d), FRAMES))
    batches = [rng.integers(0, len(ds), BATCH) for _ in range(args.batches)]

    def run_batches(d) -> Callable[[], None]:
        def run() -> None:
            for b in batches:
                d.get_batch(b)
        return run

    steady = C.interleaved({"writer": run_batches(ds), "reader": run_batches(reader)}, args.batch_repeats)
    steady = {k: [t / len(batches) for t in ts] for k, ts in steady.items()}
    after = 4  # batches timed after each append
    cyc: dict[str, list] = {"append": [], "reader refresh": [], "writer": [], "reader": []}
    touched = []
    os.sync()
    for _ in range(args.cycles):
        t0 = time.perf_counter()
        ds.add_episode(ep, task="pick")
        cyc["append"].append(time.perf_counter() - t0)
        fresh = [rng.integers(0, len(ds), BATCH) for _ in range(after)]
        ends = np.cumsum(ds.meta.episode_length)
        touched.append(len(np.unique(np.searchsorted(ends, fresh[0], side="right"))))
        for who, d in (("writer", ds), ("reader", reader)):
            if who == "reader":
                t0 = time.perf_counter()
                if not reader.refresh():
                    raise AssertionError("reader.refresh() saw no new commit after an append")
                cyc["reader refresh"].append(time.perf_counter() - t0)
            row = []
            for b in fresh:
                t0 = time.perf_counter()
                d.get_batch(b)
                row.append(time.perf_counter() - t0)
            cyc[who].append(row)
    if len(reader) != len(ds) or len(ds) != (SAMPLING_EPISODES + args.cycles) * FRAMES:
        raise AssertionError("reader and writer disagree on the number of frames")
    got_w, got_r = ds.get_batch(batches[0]), reader.get_batch(batches[0])
    for k in got_w:
        if k != "task" and not np.array_equal(got_w[k], got_r[k]):
            raise AssertionError(f"writer and reader return different {k}")
    ds.close()
    return {"steady": steady, "cycles": cyc, "touched": touched, "build_s": build_s}


def report_sampling(r: dict, args) -> None:
    steady, cyc = r["steady"], r["cycles"]
    print(f"\n4. Sampling while appending: {SAMPLING_EPISODES} episodes of {FRAMES} frames (state/action; built with "
          f"{SAMPLING_EPISODES} appends in {r['build_s']:.1f} s), get_batch({BATCH} random indices) with windows "
          f"state [-1,0], action [0..15] as in bench_sampling.py")
    print(f"   steady state (every episode mapped): median of {args.batch_repeats} x {args.batches} batches")
    for who in ("writer", "reader"):
        s = C.median(steady[who])
        name = "WritableDataset" if who == "writer" else "separate LeRobotZarrDataset"
        print(f"     {name:<30} {s * 1e3:7.3f} ms / batch   {BATCH / s:>12,.0f} samples/s")
    after = len(cyc["writer"][0])
    print(f"   right after an append (median of {args.cycles} cycles: append, then {after} get_batch on fresh random "
          f"indices, {C.median(r['touched']):.0f} distinct episodes in the first), ms and x steady")
    print(f"     append (no camera, durable=False)          {med_ms(cyc['append']):8.2f}")
    print(f"     reader: refresh()                          {med_ms(cyc['reader refresh']):8.2f}   "
          f"{C.median(cyc['reader refresh']) / C.median(steady['reader']):7.1f}x")
    print(f"     {'get_batch number after the append':<42}" + "".join(f"{k + 1:>15}" for k in range(after))
          + f"{'excess, sum':>14}")
    excess = {}
    for who in ("writer", "reader"):
        base = C.median(steady[who])
        med = np.median(np.array(cyc[who]), axis=0)
        excess[who] = float(np.median([sum(t - base for t in row) for row in cyc[who]]))
        print(f"     {who:<42}" + "".join(f"{m * 1e3:7.2f} {m / base:5.0f}x " for m in med)
              + f"{excess[who] * 1e3:>11.2f} ms")
    sw = C.median(steady["writer"])
    first = float(np.median(np.array(cyc["writer"])[:, 0]))
    per_ep = (first - sw) / max(1, C.median(r["touched"]))
    print(f"   first get_batch after an append / steady get_batch   {first / sw:6.1f}x  (writer; ~{per_ep * 1e6:.0f} "
          f"us more per episode touched: the maps of unchanged episodes are kept across commits; a reader remaps "
          f"once after its first refresh, then keeps its maps too)")
    print(f"   one append costs the sampler ~{excess['writer'] * 1e3:.1f} ms of remapping over the next {after} "
          f"batches (= {excess['writer'] / sw:.0f} steady batches), on top of the append's own "
          f"{med_ms(cyc['append']):.1f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer repetitions (about a third of the time)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per contender in parts 1, 2a, 2c "
                                                             "(default 11, --quick 5)")
    p.add_argument("--small-edits", type=int, default=None, help="single-row edits in part 2b (default 200, "
                                                                 "--quick 60)")
    p.add_argument("--ring-runs", type=int, default=None, help="ring buffer runs (default 3, --quick 1)")
    p.add_argument("--cycles", type=int, default=None, help="append/get_batch cycles in part 4 (default 20, "
                                                            "--quick 8)")
    p.add_argument("--batches", type=int, default=100, help="batches per steady-state repeat in part 4")
    p.add_argument("--batch-repeats", type=int, default=None, help="steady-state repeats (default 7, --quick 3)")
    p.add_argument("--profile-ops", type=int, default=None, help="appends profiled per store (default 5, "
                                                                 "--quick 3); 4x as many small edits")
    p.add_argument("--idle-s", type=float, default=0.2, help="disk idle time waited for before timed runs in "
                                                              "part 1 (after os.sync(); default 0.2)")
    p.add_argument("--idle-timeout", type=float, default=0.8, help="longest wait for that idle time (default 0.8 s;"
                                                                    " the disk is shared and may never be idle)")
    p.add_argument("--parts", default="1234", help="which parts to run (default 1234; 2 needs 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tmp-parent", type=Path, default=HERE.parent.parent,
                   help="where the temp work folder is made (default: the checkout's parent folder, a real disk "
                        "here; /tmp may be tmpfs)")
    p.add_argument("--out-dir", type=Path, default=None, help="work folder (kept; a fresh subfolder per run)")
    p.add_argument("--keep", action="store_true", help="keep the temp work folder")
    args = p.parse_args()
    q = args.quick
    args.repeats = args.repeats or (5 if q else 11)
    args.small_edits = args.small_edits or (60 if q else 200)
    args.ring_runs = args.ring_runs or (1 if q else 3)
    args.cycles = args.cycles or (8 if q else 20)
    args.batch_repeats = args.batch_repeats or (3 if q else 7)
    args.profile_ops = args.profile_ops or (3 if q else 5)
    if "2" in args.parts and "1" not in args.parts:
        p.error("--parts: part 2 edits the stores part 1 makes")
    warnings.filterwarnings("ignore")
    t_start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    print(f"bench_write: python {sys.version.split()[0]}, numpy {np.__version__}, lerobot_zarr "
          f"{lerobot_zarr.__version__}, {os.cpu_count()} CPUs, load average {load_average()}{', --quick' if q else ''}")
    with WriteWorkDir(args, "bench_write-", args.tmp_parent.expanduser().resolve()) as work:
        mnt, dev, fstype, opts = filesystem_of(work)
        print(f"work folder {work}: {dev} mounted on {mnt}, {fstype} ({opts})")
        _, tdev, tfs, _ = filesystem_of(Path(tempfile.gettempdir()))
        print(f"(for reference, {tempfile.gettempdir()} is {tfs} on {tdev}"
              f"{': not used, a RAM filesystem' if tfs in ('tmpfs', 'ramfs') else ''})")
        if fstype in ("tmpfs", "ramfs"):
            print("WARNING: the work folder is in RAM: the ratios say nothing about a disk (use --tmp-parent)")
        results = {}
        if "1" in args.parts:
            results[1] = bench_append(work, args, rng)
        if "2" in args.parts:
            results[2] = bench_edit(work, args, rng, results[1])
        if "3" in args.parts:
            results[3] = bench_ring(work, args, rng)
        if "4" in args.parts:
            results[4] = bench_sampling(work, args, rng)
        print(f"\n(measured in {time.perf_counter() - t_start:.0f} s; load average {load_average()} at the end: "
              f"other tenants share the {os.cpu_count()} CPUs and the disk, compare runs before trusting a figure)")
        if 1 in results:
            report_append(results[1], args)
        if 2 in results:
            report_edit(results[2], args)
        if 3 in results:
            report_ring(results[3], args)
        if 4 in results:
            report_sampling(results[4], args)


if __name__ == "__main__":
    main()
