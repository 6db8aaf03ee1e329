"""Transcode speed and size at real dataset shapes: ``lerobot_zarr.open_dataset`` (LeRobot parquet -> packed Zarr
store) vs the bare parquet read, and the open time of the result.

For each shape (default: 1M frames in 20,000 episodes of 50 frames; ~2M frames in 100,000 episodes of 10-30), it
writes a synthetic LeRobot v3.0 dataset (state/action f32[14] and LeRobot's five columns; one row group per
episode, as LeRobot writes them) and times, best of ``--runs`` runs into fresh folders, interleaved, with dirty
pages flushed and the disk idle before each run (outside the timing):

- parquet -> numpy: reading every data file with pyarrow into numpy arrays (what any transcode must do);
- tofile, one file per feature: the decoded bytes (already in memory) written with ``ndarray.tofile`` (the floor of
  writing them);
- ours: ``open_dataset(lerobot_folder, root=fresh_store, progress=False)`` (the dataset doctor checking the data as
  it passes, the default), and the same with ``doctor=False``.

The doctor's cost is a ratio of the two, measured for noise on a shared machine: each run's CPU seconds (the
process's, all its threads: what the doctor adds, whatever else runs beside) and wall seconds, the two in pairs whose
order alternates (on-off, off-on, ...), the load (1-minute average) beside each run; reported as the ratio of the CPU
sums, the median of the pairs' ratios, and best and median wall. As the doctor's cost is below the noise of one
transcode's CPU time here (a few percent), its hooks are also timed alone (:func:`doctor_alone`) against the CPU
of the transcode without it. ``--doctor-only`` runs just these.

It then checks the store against the parquet data (pack files read with numpy at the rows the episode table
gives), reports disk blocks allocated / stored bytes, file counts, and the time to open the store in a fresh
process. Targets: the 20,000-episode case within 1.5x of the bare parquet read; allocated <= 1.1x stored bytes;
the 100,000-episode store opens in < 100 ms in a fresh process; the doctor costs <= 1.05x the transcode without it.

Run from the repository root:  .venv/bin/python benchmarks/bench_transcode.py [--shapes 20k,100k] [--runs 3]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

TARGET_READ, TARGET_ALLOC, TARGET_OPEN_S, TARGET_DOCTOR = 1.5, 1.1, 0.1, 1.05
OURS, NO_DOCTOR = "lerobot_zarr open_dataset (transcode)", "the same, doctor=False"


def parquet_to_numpy(files: list[Path]) -> int:
    """Read every data file with pyarrow and convert each column to numpy (zero copy where Arrow allows)."""
    n = 0
    for f in files:
        table = pq.read_table(f, columns=list(C.FEATURES))
        for k in C.FEATURES:
            for chunk in table.column(k).chunks:
                if pa.types.is_fixed_size_list(chunk.type):
                    a = chunk.flatten().to_numpy(zero_copy_only=False).reshape(-1, chunk.type.list_size)
                else:
                    a = chunk.to_numpy(zero_copy_only=False)
                n += a.nbytes
    return n


def tofile_per_feature(arrays: dict[str, np.ndarray], out: Path) -> None:
    out.mkdir(parents=True)
    for name, arr in arrays.items():
        arr.tofile(out / f"{name}.bin")


def check_store(store: Path, arrays: dict[str, np.ndarray], start: np.ndarray) -> None:
    """Every frame of the store equals the parquet data: pack files read with numpy at the table's rows."""
    from lerobot_zarr.store.state import read_state

    state = read_state(store)
    t = state.table
    episode = np.repeat(np.arange(len(t)), t.length)
    pack = t.chunk[episode]
    row = t.offset[episode] + np.arange(len(episode)) - np.repeat(start, t.length)
    for name, arr in arrays.items():
        spec = state.arrays[name]
        for k in np.unique(pack).tolist():
            path = store.joinpath(name, "c", str(k), *(["0"] * (arr.ndim - 1)))
            data = np.fromfile(path, dtype=spec.dtype).reshape(-1, *arr.shape[1:])
            where = np.flatnonzero(pack == k)
            if not np.array_equal(data[row[where]], arr[where]):
                raise AssertionError(f"{store}: pack {k} of {name} differs from the parquet data")


def doctor_alone(src: Path, store: Path, commits: int = 1, repeats: int = 5) -> float:
    """The CPU seconds of the doctor's own work in a transcode of ``src`` that commits ``commits`` times, best of
    ``repeats``: its hooks called as the transcode calls them (each episode's frames; at each commit the episodes
    waiting for their batch held back and the findings of the others kept; the sums and reductions at the end),
    on frames read beforehand, into a copy of the transcode's ``store``. Low in noise where the difference of two
    transcodes is not: each run is short and alone on its thread. A transcode commits about every second: at a
    high load, a run of this shape commits some 80 times."""
    from lerobot_zarr.doctor.checkup import Checkup
    from lerobot_zarr.lerobot.source import LeRobotSource
    from lerobot_zarr.store.state import read_state

    source = LeRobotSource(src)
    episodes = list(source.iter_episodes(range(len(source.episodes))))
    every = max(1, len(episodes) // commits)
    best = float("inf")
    for i in range(repeats):
        root = store.with_name(f"doctor-alone-{i}")
        shutil.copytree(store, root)
        shutil.rmtree(root / ".doctor")
        state = read_state(root)
        per = {name: state.episode_hashes(name).tolist() for name in state.arrays}
        hashes = {e: {name: values[e] for name, values in per.items()} for e in range(len(state.table))}
        c0 = time.thread_time()
        checkup = Checkup.of_source(source)
        done: list[int] = []
        for k, (e, frames) in enumerate(episodes, 1):
            checkup.frames(e, frames)
            done.append(e)
            if k % every == 0 or k == len(episodes):
                held = set(checkup.waiting(k == len(episodes), 10.0))
                checkup.save(root, state, [x for x in done if x not in held], hashes)
                done = [x for x in done if x in held]
        checkup.finish(root, state)
        best = min(best, time.thread_time() - c0)
        shutil.rmtree(root)
    return best


OPEN_PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
import lerobot_zarr
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
ds = lerobot_zarr.LeRobotZarrDataset(sys.argv[1])
t_open = time.perf_counter() - t0
t0 = time.perf_counter()
ds = lerobot_zarr.open_dataset(sys.argv[1], progress=False)
print(json.dumps({"import_s": t_import, "open_s": t_open, "open_dataset_s": time.perf_counter() - t0}))
"""


def open_in_fresh_process(store: Path, repeats: int = 5) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    runs = [json.loads(subprocess.run([sys.executable, "-c", OPEN_PROBE, str(store)], env=env, capture_output=True,
                                      text=True, check=True).stdout.strip().splitlines()[-1])
            for _ in range(repeats)]
    return {k: min(r[k] for r in runs) for k in runs[0]}


def run_shape(work: Path, name: str, episodes: int, lengths: tuple[int, int], per_file: int, args) -> dict:
    import lerobot_zarr

    print(f"\n[{name}] {episodes:,} episodes of {lengths[0]}-{lengths[1]} frames")
    src = C.build_shape(work, name, episodes, lengths, per_file, args.seed)
    files = C.data_files(src)
    arrays = C.read_columns(files)
    start, end, _ = C.read_episode_table(src)
    total = sum(a.nbytes for a in arrays.values())
    runs_dir = (args.target_dir.expanduser().resolve() if args.target_dir else work) / f"runs-{name}"
    shutil.rmtree(runs_dir, ignore_errors=True)
    runs_dir.mkdir(parents=True)
    counter = iter(range(10**9))
    last: list[Path] = []  # the last store made with the doctor (checked below; the others are removed)

    def transcode(out: Path, doctor: bool = True) -> None:
        lerobot_zarr.open_dataset(src, root=out, progress=False, doctor=doctor)
        if doctor:
            last[:] = [out]

    contenders = {"parquet -> numpy (pyarrow read_table)": lambda out: parquet_to_numpy(files),
                  "tofile, one file per feature": lambda out: tofile_per_feature(arrays, out),
                  OURS: transcode, NO_DOCTOR: lambda out: transcode(out, doctor=False)}
    if args.doctor_only:
        contenders = {k: v for k, v in contenders.items() if k in (OURS, NO_DOCTOR)}
    parquet_to_numpy(files)  # warm-up: page cache of the parquet files, imports
    lerobot_zarr.open_dataset(src, root=runs_dir / "warm-up", progress=False)
    shutil.rmtree(runs_dir / "warm-up")
    runs = args.runs if name != "100k" or args.runs_100k is None else args.runs_100k
    times: dict[str, list[float]] = {k: [] for k in contenders}
    cpu: dict[str, list[float]] = {k: [] for k in contenders}
    load: dict[str, list[float]] = {k: [] for k in contenders}
    for i in range(runs):
        order = list(contenders) if i % 2 == 0 else list(reversed(contenders))  # the doctor's pair alternates
        for label in order:
            C.settle_disk(runs_dir)
            out, before = runs_dir / f"run-{next(counter)}", list(last)
            c0, t0 = time.process_time(), time.perf_counter()
            contenders[label](out)
            times[label].append(time.perf_counter() - t0)
            cpu[label].append(time.process_time() - c0)
            load[label].append(os.getloadavg()[0])
            if label in (OURS, NO_DOCTOR) and args.doctor_only:
                print(f"  {label:<42} wall {times[label][-1]:7.3f} s  CPU {cpu[label][-1]:7.3f} s  "
                      f"load {load[label][-1]:5.1f}", flush=True)
            for done in {out, *before} - set(last):  # outside the timing
                shutil.rmtree(done, ignore_errors=True)
    store = last[0]
    check_store(store, arrays, start)
    alone = {n: doctor_alone(src, store, n) for n in (1, 80)} if OURS in contenders else None
    prof_text = None
    if args.profile:
        C.settle_disk(runs_dir)
        prof = cProfile.Profile()
        prof.enable()
        lerobot_zarr.open_dataset(src, root=runs_dir / "profiled", progress=False)
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(20)
        prof_text = s.getvalue()
    result = {"name": name, "episodes": episodes, "frames": int(end[-1]), "bytes": total, "times": times,
              "cpu": cpu, "load": load, "doctor_alone": alone,
              "stored": sum(p.stat().st_size for p in store.rglob("*") if p.is_file()),
              "allocated": C.allocated_bytes(store), "files": sum(1 for p in store.rglob("*") if p.is_file()),
              "open": None if args.doctor_only else open_in_fresh_process(store), "profile": prof_text}
    shutil.rmtree(runs_dir, ignore_errors=True)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="20k,100k", help=f"comma-separated among {', '.join(C.SHAPES)}")
    p.add_argument("--episodes", type=int, default=None, help="a custom shape: this many episodes ...")
    p.add_argument("--episode-frames", default=None, metavar="LO-HI", help="... of LO to HI frames")
    p.add_argument("--runs", type=int, default=3, help="runs per contender, best (and median) reported; default 3")
    p.add_argument("--runs-100k", type=int, default=1, help="runs for the 100k shape (default 1)")
    p.add_argument("--profile", action="store_true", help="also cProfile one transcode per shape")
    p.add_argument("--doctor-only", action="store_true",
                   help="only the transcode with the doctor and without (its cost), not the baselines or the open")
    p.add_argument("--target-dir", type=Path, default=None, help="where the timed runs write (e.g. /dev/shm)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", type=Path, default=None, help="work folder (kept; datasets reused)")
    p.add_argument("--keep", action="store_true", help="keep the temporary work folder")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    print(f"bench_transcode: python {sys.version.split()[0]}, numpy {np.__version__}, pyarrow {pa.__version__}, "
          f"{os.cpu_count()} CPUs")
    with C.WorkDir(args, "bench_transcode-") as work:
        results = [run_shape(work, name, *shape, args) for name, shape in
                   C.parse_shapes(args.shapes, args.episodes, args.episode_frames).items()]

    for r in results:
        times, cpu = r["times"], r["cpu"]
        print(f"\n[{r['name']}] {r['frames']:,} frames in {r['episodes']:,} episodes, {r['bytes'] / 1e6:.0f} MB "
              f"stored; best and median of {len(next(iter(times.values())))} runs, load "
              f"{min(min(v) for v in r['load'].values()):.1f}-{max(max(v) for v in r['load'].values()):.1f}")
        print(f"{'':<42}{'best s':>9}{'median s':>10}{'CPU best':>10}{'CPU med':>9}{'MB/s (best)':>13}")
        for label, ts in times.items():
            print(f"{label:<42}{min(ts):>9.3f}{C.median(ts):>10.3f}{min(cpu[label]):>10.3f}"
                  f"{C.median(cpu[label]):>9.3f}{r['bytes'] / 1e6 / min(ts):>13.0f}")
        on, off = np.array(cpu[OURS]), np.array(cpu[NO_DOCTOR])
        doctor = on.sum() / off.sum()
        print(f"  doctor on / off, CPU          {doctor:5.3f}x   (target <= {TARGET_DOCTOR}x: "
              f"{'met' if doctor <= TARGET_DOCTOR else 'MISSED'}; the sums of {len(on)} pairs; median of the pairs' "
              f"ratios {float(np.median(on / off)):.3f}x, best {on.min() / off.min():.3f}x)")
        for n, seconds in r["doctor_alone"].items():
            print(f"  the doctor's own CPU          {seconds:.3f} s with {n} commit{'s' if n > 1 else ''}, "
                  f"{seconds / off.min() * 100:.1f} % of the CPU of the transcode without it (best): "
                  f"{1 + seconds / off.min():.3f}x (its hooks alone, best of 5)")
        print(f"  doctor on / off, wall         {min(times[OURS]) / min(times[NO_DOCTOR]):5.3f}x   (best; medians "
              f"{C.median(times[OURS]) / C.median(times[NO_DOCTOR]):.3f}x, median of the pairs' ratios "
              f"{float(np.median(np.array(times[OURS]) / np.array(times[NO_DOCTOR]))):.3f}x)")
        if r["profile"]:
            print(r["profile"])
        if args.doctor_only:
            continue
        read = min(times["parquet -> numpy (pyarrow read_table)"])
        ours = min(times[OURS])
        alloc = r["allocated"] / r["bytes"]
        print(f"  transcode / parquet read      {ours / read:5.2f}x   (target <= {TARGET_READ}x"
              + (f": {'met' if ours / read <= TARGET_READ else 'MISSED'})" if r["name"] == "20k" else ")"))
        print(f"  disk allocated / stored bytes {alloc:5.2f}x   (target <= {TARGET_ALLOC}x: "
              f"{'met' if alloc <= TARGET_ALLOC else 'MISSED'}); {r['files']} files, "
              f"{r['stored'] / 1e6:.0f} MB of file sizes")
        o = r["open"]
        print(f"  fresh process (best of 5): LeRobotZarrDataset(store) {o['open_s'] * 1e3:.1f} ms"
              + (f" (target < {TARGET_OPEN_S * 1e3:.0f} ms: {'met' if o['open_s'] < TARGET_OPEN_S else 'MISSED'})"
                 if r["name"] == "100k" else "")
              + f", open_dataset(store) {o['open_dataset_s'] * 1e3:.1f} ms, import lerobot_zarr "
                f"{o['import_s'] * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
