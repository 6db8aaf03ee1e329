"""Transcode speed: ``lerobot_zarr.open_dataset`` (LeRobot parquet -> episode-chunked Zarr store) vs raw tofile.

Builds a synthetic LeRobot v3.0 dataset (default 2,000 episodes of 300-700 frames, ~1e6 frames, state/action
f32[14], ~148 bytes per frame over the 7 stored features), then times, best of N runs into fresh target folders
(dirty pages flushed with os.sync() before each run, outside the timing; runs of the contenders interleaved):

- parquet -> numpy: reading every data file with pyarrow into numpy arrays (the unavoidable part of a transcode);
- tofile, one file per feature: the same bytes (already in memory) written with ``ndarray.tofile``;
- tofile, one file per episode per feature (flat folder per feature);
- tofile, one file per episode per feature at the store's zarr chunk paths (``<feature>/c/<e>/0``: one folder
  per chunk, as the zarr v3 chunk key encoding requires);
- tofile per episode followed by ``os.sync()`` (the transcoder calls ``os.sync()`` at each commit, about every
  second, so that a crash never leaves committed metadata pointing at unwritten data);
- ours: ``open_dataset(lerobot_folder, root=fresh_store, progress=False)``.

MB/s are stored-bytes (the decoded arrays, what lands in the store) per second for every row.
``--profile`` adds a cProfile of one transcode, restricted to the interesting frames.

Run (from the repository root):  .venv/bin/python benchmarks/bench_transcode.py [--frames-scale 0.1]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

TARGET_RATIO = 3.0  # transcode / tofile (one file per episode per feature) <= 3


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


def tofile_per_episode(arrays: dict[str, np.ndarray], start: np.ndarray, end: np.ndarray, out: Path) -> None:
    bounds = list(zip(start.tolist(), end.tolist()))
    for name, arr in arrays.items():
        d = out / name
        d.mkdir(parents=True)
        for e, (s, t) in enumerate(bounds):
            arr[s:t].tofile(d / str(e))


def tofile_zarr_paths(arrays: dict[str, np.ndarray], start: np.ndarray, end: np.ndarray, out: Path) -> None:
    bounds = list(zip(start.tolist(), end.tolist()))
    for name, arr in arrays.items():
        zeros = ["0"] * (arr.ndim - 1)
        for e, (s, t) in enumerate(bounds):
            path = out.joinpath(name, "c", str(e), *zeros)
            path.parent.mkdir(parents=True, exist_ok=True)
            arr[s:t].tofile(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_dataset_args(p)
    p.add_argument("--runs", type=int, default=3, help="runs per contender, best (and median) reported; default 3")
    p.add_argument("--profile", action="store_true", help="also cProfile one transcode and print the top frames")
    p.add_argument("--target-dir", type=Path, default=None,
                   help="where the timed runs write (default: inside the work folder; /dev/shm isolates CPU cost)")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    import lerobot_zarr

    n_eps = C.n_episodes(args)
    print(f"bench_transcode: {n_eps} episodes of {C.LENGTHS[0]}-{C.LENGTHS[1]} frames, state/action f32[14]; "
          f"python {sys.version.split()[0]}, numpy {np.__version__}, pyarrow {pa.__version__}, {os.cpu_count()} CPUs")
    with C.WorkDir(args, "bench_transcode-") as work:
        src, _ = C.build_dataset(work, n_eps, args.episodes_per_file, args.seed)
        files = C.data_files(src)
        parquet_mb = sum(f.stat().st_size for f in files) / 1e6
        arrays = C.read_columns(files)  # the bytes the store will hold, in memory for the tofile baselines
        start, end, _ = C.read_episode_table(src)
        frames = int(end[-1])
        total = sum(a.nbytes for a in arrays.values())
        print(f"{frames:,} frames in {len(files)} data files ({parquet_mb:.0f} MB parquet); "
              f"{total / 1e6:.0f} MB of decoded arrays ({total / frames:.0f} B/frame, {len(arrays)} features)")
        runs_dir = (args.target_dir.expanduser().resolve() / f"bench_transcode-runs-{os.getpid()}"
                    if args.target_dir else work / "runs")
        print(f"timed runs write under {runs_dir}")

        counter = iter(range(10**9))

        def fresh() -> Path:
            return runs_dir / f"run-{next(counter)}"

        last_store: list[Path] = []

        def transcode(out: Path) -> None:
            lerobot_zarr.open_dataset(src, root=out, progress=False)
            last_store[:] = [out]

        def tofile_sync(out: Path) -> None:
            tofile_per_episode(arrays, start, end, out)
            os.sync()

        contenders = {
            "parquet -> numpy (pyarrow read_table)": lambda out: parquet_to_numpy(files),
            "tofile, one file per feature": lambda out: tofile_per_feature(arrays, out),
            "tofile, one file per episode per feature": lambda out: tofile_per_episode(arrays, start, end, out),
            "tofile per episode, zarr chunk paths (+mkdir)": lambda out: tofile_zarr_paths(arrays, start, end, out),
            "tofile per episode + os.sync()": tofile_sync,
            "lerobot_zarr open_dataset (transcode)": transcode,
        }
        # Run folders are all kept until the end: deleting 14,000 files between runs makes ext4 (mounted with
        # `discard` here) do journal and discard work that lands in the next timed run.
        shutil.rmtree(runs_dir, ignore_errors=True)
        runs_dir.mkdir(parents=True)
        # warm-up: page cache of the parquet files, imports, first-touch of the arrays
        parquet_to_numpy(files)
        transcode(fresh())
        times: dict[str, list[float]] = {k: [] for k in contenders}
        waited = []
        for _ in range(args.runs):
            for name, fn in contenders.items():
                # previous runs' dirty pages and the disk's pending discards are not billed to this run
                waited.append(C.settle_disk(runs_dir))
                out = fresh()
                t0 = time.perf_counter()
                fn(out)
                times[name].append(time.perf_counter() - t0)
        # check the last transcode wrote the parquet data (first and last episode, every feature)
        store = last_store[0]
        for e in (0, n_eps - 1):
            for name, arr in arrays.items():
                path = store.joinpath(name, "c", str(e), *(["0"] * (arr.ndim - 1)))
                want = arr[int(start[e]):int(end[e])]
                got = np.fromfile(path, dtype=want.dtype).reshape(want.shape)
                if not np.array_equal(got, want):
                    raise AssertionError(f"transcoded chunk {path} differs from the parquet data")
        store_mb = C.dir_bytes(store) / 1e6

        prof_text = None
        if args.profile:
            C.settle_disk(runs_dir)
            prof = cProfile.Profile()
            prof.enable()
            transcode(fresh())
            prof.disable()
            s = io.StringIO()
            st = pstats.Stats(prof, stream=s).sort_stats("tottime")
            st.print_stats(25)
            s.write("\n--- cumulative ---\n")
            st.sort_stats("cumulative").print_stats(35)
            prof_text = s.getvalue()
        shutil.rmtree(runs_dir, ignore_errors=True)
        if args.target_dir:
            print(f"(timed runs wrote to {runs_dir}, removed)")

    print(f"\nTranscode, {frames:,} frames, {total / 1e6:.0f} MB stored; wall seconds, best and median of "
          f"{args.runs} runs into fresh folders (2-core shared VM)")
    base = min(times["tofile, one file per episode per feature"])
    base_sync = min(times["tofile per episode + os.sync()"])
    print(f"{'':<48}{'best s':>9}{'median s':>10}{'MB/s (best)':>13}{'x tofile/ep':>13}")
    for name, ts in times.items():
        print(f"{name:<48}{min(ts):>9.3f}{C.median(ts):>10.3f}{total / 1e6 / min(ts):>13.0f}{min(ts) / base:>12.2f}x")
    ours = min(times["lerobot_zarr open_dataset (transcode)"])
    ratio = ours / base
    print("\nRatios (best of runs)")
    print(f"  transcode / tofile per episode             {ratio:6.2f}x   (target <= {TARGET_RATIO:g}x: "
          f"{'meets target' if ratio <= TARGET_RATIO else 'MISSES target'})")
    print(f"  transcode / (tofile per episode + os.sync) {ours / base_sync:6.2f}x")
    read = min(times["parquet -> numpy (pyarrow read_table)"])
    print(f"  transcode / parquet->numpy read            {ours / read:6.2f}x")
    print(f"  store on disk {store_mb:.0f} MB (= arrays + zarr metadata)")
    print(f"  (before each run: os.sync() and a wait for the disk to be idle 1 s, "
          f"{C.median(waited):.1f} s median wait)")
    if prof_text:
        print("\ncProfile of one transcode (sorted by own time, then cumulative):")
        print(prof_text)


if __name__ == "__main__":
    main()
