"""Random-access sampling speed: lerobot_zarr vs a hand-written flat np.memmap floor vs the HF-datasets path.

Builds a synthetic LeRobot v3.0 dataset (default 2,000 episodes of 300-700 frames, ~1e6 frames, state/action
f32[14]), transcodes it with ``lerobot_zarr.open_dataset``, and times, on the same seeded random indices and in
the same process (interleaved repeats, warm page cache):

- ours:  ``ds[i]`` and ``ds.get_batch(256 indices)``;
- floor: every feature written once with ``ndarray.tofile`` into one flat file, opened with ``np.memmap``;
  per sample ``np.searchsorted`` on the episode starts, clamped window indices, fancy-index gathers, and the same
  dict of keys as ours (a vectorised version for batches);
- HF:    ``datasets.load_dataset("parquet", ...)`` with a numpy port of LeRobot's ``hf_transform_to_torch`` and
  LeRobot's ``__getitem__`` logic (``hf[i]``, ``meta.episodes[ep]`` bounds, ``hf[key][query_indices]`` per
  windowed key, ``tasks.iloc[t].name``); also a variant with ``with_format("numpy")`` and episode bounds from
  plain lists.

Also: time and RSS of opening the existing store (fresh subprocess), cost of mapping an episode on first touch,
and an equality check of ours against the floor (and against HF) that raises on mismatch.

Run (from the repository root):  .venv/bin/python benchmarks/bench_sampling.py [--frames-scale 0.1]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

from lerobot_zarr.baseline import FlatMemmapSampler  # noqa: E402

BATCH = 256
TARGET_ITEM_RATIO = 2.0  # ours ds[i] / floor ds[i] <= 2
TARGET_HF_RATIO = 50.0  # HF / ours ds[i] >= 50
TARGET_BATCH_RATE = 1_000_000  # get_batch samples/s >= 1e6


def delta_timestamps() -> dict[str, list[float]]:
    return {"observation.state": [-1 / C.FPS, 0.0], "action": [k / C.FPS for k in range(16)]}


# ----------------------------------------------------------------------------------------- the HF path
def numpy_transform(items: dict) -> dict:
    """numpy port of LeRobot's ``hf_transform_to_torch`` (no images here): each value -> array, torch dtypes."""
    for key, values in items.items():
        first = values[0]
        if first is None or isinstance(first, str):
            continue
        out = []
        for x in values:
            a = np.asarray(x)
            out.append(a.astype(np.float32) if a.dtype == np.float64 else a)  # torch.tensor(floats) is float32
        items[key] = out
    return items


class HFPaths:
    """LeRobot's random access through HF ``datasets`` (the part of LeRobotDataset.__getitem__ without videos)."""

    def __init__(self, src: Path, cache_dir: Path, deltas: dict):
        import datasets
        import pandas as pd

        datasets.logging.set_verbosity_error()
        datasets.disable_progress_bars()
        files = [str(f) for f in C.data_files(src)]
        t0 = time.perf_counter()
        base = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(cache_dir))
        self.load_s = time.perf_counter() - t0
        self.lerobot = base.with_transform(numpy_transform)  # LeRobot: hf_dataset.set_transform(hf_transform_to_torch)
        self.lean = base.with_format("numpy")
        ep_files = [str(f) for f in sorted((src / "meta" / "episodes").glob("*/*.parquet"))]
        episodes = datasets.load_dataset("parquet", data_files=ep_files, split="train", cache_dir=str(cache_dir))
        # LeRobot's load_episodes drops the stats columns to speed up row access
        self.episodes = episodes.select_columns([k for k in episodes.features if not k.startswith("stats/")])
        self.tasks_df = pd.read_parquet(src / "meta" / "tasks.parquet")  # index = task string, like LeRobot
        self.delta_indices = {k: [round(d * C.FPS) for d in v] for k, v in deltas.items()}
        start, end, tasks = C.read_episode_table(src)
        self.start, self.end, self.tasks = start.tolist(), end.tolist(), tasks
        self.offsets = {k: np.asarray(v, dtype=np.int64) for k, v in self.delta_indices.items()}

    def lerobot_item(self, idx: int) -> dict:
        """LeRobotDataset.__getitem__ (v3.0, no video, no image transforms), numpy instead of torch."""
        item = self.lerobot[idx]
        ep_idx = item["episode_index"].item()
        ep = self.episodes[ep_idx]
        ep_start, ep_end = ep["dataset_from_index"], ep["dataset_to_index"]
        query_indices = {key: [max(ep_start, min(ep_end - 1, idx + delta)) for delta in delta_idx]
                         for key, delta_idx in self.delta_indices.items()}
        padding = {f"{key}_is_pad": np.array([(idx + delta < ep_start) | (idx + delta >= ep_end)
                                               for delta in delta_idx])
                   for key, delta_idx in self.delta_indices.items()}
        query_result = {key: np.stack(self.lerobot[key][q_idx]) for key, q_idx in query_indices.items()}
        item = {**item, **padding}
        for key, val in query_result.items():
            item[key] = val
        task_idx = item["task_index"].item()
        item["task"] = self.tasks_df.iloc[task_idx].name
        return item

    def lean_item(self, idx: int) -> dict:
        """Variant: ``with_format("numpy")`` instead of the transform, episode bounds and tasks from lists."""
        item = self.lean[idx]
        e = int(item["episode_index"])
        lo, hi = self.start[e], self.end[e]
        for key, off in self.offsets.items():
            q = off + idx
            item[f"{key}_is_pad"] = (q < lo) | (q >= hi)
            item[key] = self.lean[key][np.clip(q, lo, hi - 1).tolist()]
        item["task"] = self.tasks[int(item["task_index"])]
        return item


# ----------------------------------------------------------------------------------------- checks
def assert_same(a: dict, b: dict, where: str, exact_types: bool = True) -> None:
    if set(a) != set(b):
        raise AssertionError(f"{where}: keys differ: only ours {sorted(set(a) - set(b))}, "
                             f"only reference {sorted(set(b) - set(a))}")
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, (str, list)) or isinstance(y, (str, list)):
            if x != y:
                raise AssertionError(f"{where}: {k!r} differs: {x!r} != {y!r}")
            continue
        xa, ya = np.asarray(x), np.asarray(y)
        if exact_types and (xa.dtype != ya.dtype or xa.shape != ya.shape or type(x) is not type(y)):
            raise AssertionError(f"{where}: {k!r}: {type(x).__name__} {xa.dtype}{xa.shape} vs "
                                 f"{type(y).__name__} {ya.dtype}{ya.shape}")
        if xa.size != ya.size or not np.array_equal(xa.reshape(-1), ya.reshape(-1).astype(xa.dtype)):
            raise AssertionError(f"{where}: {k!r} values differ:\n{xa}\n{ya}")


def check_equal(ds, floor: FlatMemmapSampler, hf: HFPaths | None, start: np.ndarray, end: np.ndarray,
                rng: np.random.Generator) -> int:
    """ours == floor (exact: same keys, types, dtypes, shapes, values) at random frames and episode edges."""
    edges = []
    for e in rng.choice(len(start), size=min(8, len(start)), replace=False):
        s, t = int(start[e]), int(end[e])
        edges += [s, s + 1, t - 15, t - 2, t - 1]
    idx = [*rng.integers(0, len(ds), 40).tolist(), *edges, 0, len(ds) - 1]
    for i in idx:
        assert_same(ds[i], floor[i], f"ds[{i}] vs floor")
    assert_same(ds.get_batch(idx), floor.get_batch(idx), "get_batch vs floor")
    if hf is not None:
        for i in idx[:10] + edges[:10]:
            assert_same(ds[i], hf.lerobot_item(i), f"ds[{i}] vs HF LeRobot path", exact_types=False)
            assert_same(ds[i], hf.lean_item(i), f"ds[{i}] vs HF lean path", exact_types=False)
    return len(idx)


# ----------------------------------------------------------------------------------------- open probe
PROBE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import _common as C
import numpy as np
import lerobot_zarr
store, deltas = sys.argv[2], json.loads(sys.argv[3])
m0 = C.proc_status()
t0 = time.perf_counter()
ds = lerobot_zarr.LeRobotZarrDataset(store, delta_timestamps=deltas)
t_open = time.perf_counter() - t0
m1 = C.proc_status()
t0 = time.perf_counter(); ds[0]; t_first = time.perf_counter() - t0
m2 = C.proc_status()
firsts = ds.meta.episode_start.copy()
t0 = time.perf_counter(); ds.get_batch(firsts); t_all = time.perf_counter() - t0   # maps every episode
m3 = C.proc_status()
t0 = time.perf_counter(); ds.get_batch(firsts); t_all_warm = time.perf_counter() - t0
print(json.dumps({"open_s": t_open, "first_item_s": t_first, "map_all_s": t_all, "map_all_warm_s": t_all_warm,
                  "episodes": int(ds.meta.total_episodes), "mem": [m0, m1, m2, m3]}))
"""


def open_probe(store: Path, deltas: dict) -> dict:
    here = str(Path(__file__).resolve().parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", PROBE, here, str(store), json.dumps(deltas)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_dataset_args(p)
    p.add_argument("--items", type=int, default=20000, help="random indices timed with ds[i] (default 20000)")
    p.add_argument("--batches", type=int, default=100, help=f"batches of {BATCH} timed with get_batch (default 100)")
    p.add_argument("--hf-samples", type=int, default=500, help="samples timed on the HF path (default 500)")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats (best and median reported), default 7")
    p.add_argument("--no-hf", action="store_true", help="skip the HF datasets path")
    args = p.parse_args()

    warnings.filterwarnings("ignore")
    logging.getLogger("datasets").setLevel(logging.ERROR)
    import lerobot_zarr

    deltas = delta_timestamps()
    n_eps = C.n_episodes(args)
    print(f"bench_sampling: {n_eps} episodes of {C.LENGTHS[0]}-{C.LENGTHS[1]} frames, state/action f32[14], "
          f"deltas state [-1/fps, 0], action [k/fps, k=0..15]; python {sys.version.split()[0]}, "
          f"numpy {np.__version__}, {os.cpu_count()} CPUs")
    with C.WorkDir(args, "bench_sampling-") as work:
        src, reused = C.build_dataset(work, n_eps, args.episodes_per_file, args.seed)
        store, floor_dir, hf_cache = work / "store", work / "floor", work / "hf_cache"
        if not reused:
            for d in (store, floor_dir, hf_cache):
                shutil.rmtree(d, ignore_errors=True)

        # --- ours: transcode (or reuse) and open ---------------------------------------------------------
        t0 = time.perf_counter()
        ds = lerobot_zarr.open_dataset(src, root=store, delta_timestamps=deltas, progress=False)
        t_first_open = time.perf_counter() - t0
        n = len(ds)
        stored_mb = C.dir_bytes(store) / 1e6
        print(f"open_dataset (transcode if needed): {t_first_open:.2f} s; {n:,} frames; store {stored_mb:.0f} MB")

        # --- floor: read the parquet independently, tofile one flat file per feature ---------------------
        start, end, tasks = C.read_episode_table(src)
        if not (floor_dir / "meta.json").exists():
            t0 = time.perf_counter()
            FlatMemmapSampler.write(floor_dir, C.read_columns(C.data_files(src)), start, end - start, tasks, C.FPS)
            print(f"floor written (parquet -> numpy -> tofile) in {time.perf_counter() - t0:.2f} s")
        floor = FlatMemmapSampler(floor_dir, deltas)
        assert len(floor) == n, (len(floor), n)

        hf = None
        if not args.no_hf:
            hf = HFPaths(src, hf_cache, deltas)
            print(f"HF datasets load_dataset('parquet') -> Arrow cache: {hf.load_s:.2f} s "
                  f"(cache {C.dir_bytes(hf_cache) / 1e6:.0f} MB)")

        rng = np.random.default_rng(args.seed)
        n_checked = check_equal(ds, floor, hf, start, end, np.random.default_rng(args.seed + 1))
        print(f"equality check passed: ours == floor at {n_checked} frames (random + episode edges), "
              f"ds[i] and get_batch{'; ours == HF (values) at 20 frames' if hf else ''}")

        items = rng.integers(0, n, args.items).tolist()
        batches = [rng.integers(0, n, BATCH) for _ in range(args.batches)]
        hf_items = items[:args.hf_samples]

        def run_items(get):
            def f():
                for i in items:
                    get(i)
            return f

        def run_batches(get_batch):
            def f():
                for b in batches:
                    get_batch(b)
            return f

        # warm-up: page cache, maps, lazy imports
        for fn in (run_items(ds.__getitem__), run_items(floor.__getitem__), run_batches(ds.get_batch),
                   run_batches(floor.get_batch)):
            fn()
        t_items = C.interleaved({"ours": run_items(ds.__getitem__), "floor": run_items(floor.__getitem__)},
                                args.repeats)
        t_batch = C.interleaved({"ours": run_batches(ds.get_batch), "floor": run_batches(floor.get_batch)},
                                args.repeats)
        t_hf = {}
        if hf is not None:
            hf_fns = {"lerobot": lambda: [hf.lerobot_item(i) for i in hf_items],
                      "lean": lambda: [hf.lean_item(i) for i in hf_items],
                      "ours": lambda: [ds[i] for i in hf_items]}
            for fn in hf_fns.values():
                fn()
            t_hf = C.interleaved(hf_fns, max(3, args.repeats // 2))

        # --- opening the existing store ------------------------------------------------------------------
        def timed(fn, k=5):
            ts = []
            for _ in range(k):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            return C.median(ts)

        t_open_cls = timed(lambda: lerobot_zarr.LeRobotZarrDataset(store, delta_timestamps=deltas))
        t_open_store = timed(lambda: lerobot_zarr.open_dataset(store, delta_timestamps=deltas, progress=False))
        t_open_src = timed(lambda: lerobot_zarr.open_dataset(src, root=store, delta_timestamps=deltas,
                                                              progress=False))
        probe = open_probe(store, deltas)

    # ------------------------------------------------------------------------------------------- report
    us = lambda ts, k: [t / k * 1e6 for t in ts]  # noqa: E731
    ours_i, floor_i = us(t_items["ours"], len(items)), us(t_items["floor"], len(items))
    ours_b, floor_b = us(t_batch["ours"], BATCH * len(batches)), us(t_batch["floor"], BATCH * len(batches))
    rows = [("ours      ds[i]", ours_i, len(items)),
            ("floor     ds[i]   (flat np.memmap, hand-written)", floor_i, len(items)),
            (f"ours      get_batch({BATCH}) per sample", ours_b, BATCH * len(batches)),
            (f"floor     get_batch({BATCH}) per sample", floor_b, BATCH * len(batches))]
    if t_hf:
        hf_lr, hf_lean = us(t_hf["lerobot"], len(hf_items)), us(t_hf["lean"], len(hf_items))
        ours_hf = us(t_hf["ours"], len(hf_items))
        rows += [("HF datasets, LeRobot __getitem__ path", hf_lr, len(hf_items)),
                 ("HF datasets, with_format('numpy') variant", hf_lean, len(hf_items)),
                 ("ours      ds[i] on the same HF indices", ours_hf, len(hf_items))]

    print(f"\nSampling, {n:,} frames, warm page cache, same seeded random indices; µs per sample, best and "
          f"median of {args.repeats} interleaved repeats (HF: {max(3, args.repeats // 2)})")
    print(f"{'':<50}{'best µs':>10}{'median µs':>11}{'samples/s (best)':>18}{'n':>8}")
    for name, ts, k in rows:
        print(f"{name:<50}{min(ts):>10.2f}{C.median(ts):>11.2f}{1e6 / min(ts):>18,.0f}{k:>8}")

    def mark(ok: bool) -> str:
        return "meets target" if ok else "MISSES target"

    r_item = min(ours_i) / min(floor_i)
    r_item_med = C.median(ours_i) / C.median(floor_i)
    r_batch = min(ours_b) / min(floor_b)
    rate = 1e6 / min(ours_b)
    print("\nRatios")
    print(f"  ours/floor ds[i]            {r_item:6.2f}x best, {r_item_med:.2f}x median   "
          f"(target <= {TARGET_ITEM_RATIO:g}x: {mark(r_item <= TARGET_ITEM_RATIO)})")
    print(f"  ours/floor get_batch        {r_batch:6.2f}x best, {C.median(ours_b) / C.median(floor_b):.2f}x median")
    print(f"  get_batch({BATCH}) samples/s   {rate:,.0f} best, {1e6 / C.median(ours_b):,.0f} median   "
          f"(target >= {TARGET_BATCH_RATE:,}/s: {mark(rate >= TARGET_BATCH_RATE)})")
    if t_hf:
        r_hf = min(hf_lr) / min(ours_hf)
        print(f"  HF LeRobot path / ours ds[i] {r_hf:6.1f}x best, {C.median(hf_lr) / C.median(ours_hf):.1f}x median   "
              f"(target >= {TARGET_HF_RATIO:g}x: {mark(r_hf >= TARGET_HF_RATIO)})")
        print(f"  HF numpy-format / ours ds[i] {min(hf_lean) / min(ours_hf):6.1f}x best")
        print(f"  HF LeRobot path / ours ds[i] {min(hf_lr) / min(ours_i):6.1f}x best, "
              f"using the {len(items)}-index ds[i] figure")

    m0, m1, m2, m3 = probe["mem"]
    print("\nOpening the existing store (already transcoded)")
    print(f"  LeRobotZarrDataset(store)                      {t_open_cls * 1e3:8.2f} ms  (median of 5, in process)")
    print(f"  open_dataset(store)                            {t_open_store * 1e3:8.2f} ms")
    print(f"  open_dataset(lerobot_folder, root=store)       {t_open_src * 1e3:8.2f} ms  "
          f"(re-reads the source metadata and fingerprints it)")
    print(f"  fresh process: LeRobotZarrDataset(store)       {probe['open_s'] * 1e3:8.2f} ms, "
          f"VmRSS +{(m1['VmRSS'] - m0['VmRSS']) / 1024:.2f} MiB (RssAnon +{(m1['RssAnon'] - m0['RssAnon']) / 1024:.2f}"
          f" MiB, RssFile +{(m1['RssFile'] - m0['RssFile']) / 1024:.2f} MiB)")
    print(f"    first ds[0] (maps one episode)               {probe['first_item_s'] * 1e3:8.2f} ms, "
          f"VmRSS +{(m2['VmRSS'] - m1['VmRSS']) / 1024:.2f} MiB")
    print(f"    get_batch(first frame of every episode)     {probe['map_all_s'] * 1e3:8.2f} ms cold "
          f"({(probe['map_all_s'] - probe['map_all_warm_s']) / probe['episodes'] * 1e6:.1f} µs to map one episode, "
          f"all features), {probe['map_all_warm_s'] * 1e3:.2f} ms warm; "
          f"VmRSS +{(m3['VmRSS'] - m2['VmRSS']) / 1024:.2f} MiB (RssAnon +{(m3['RssAnon'] - m2['RssAnon']) / 1024:.2f} "
          f"MiB; VmSize +{(m3['VmSize'] - m0['VmSize']) / 2**20:.1f} GiB of address space reserved)")
    print("    (RssFile counts page-cache pages of the chunk files mapped into the process: shared with the page cache"
          " and other workers, not copies; RssAnon is the private memory)")
    print(f"  (whole store on disk: {stored_mb:.0f} MB)")


if __name__ == "__main__":
    main()
