"""Random-access sampling speed at real dataset shapes: lerobot_zarr vs the best hand-written flat np.memmap sampler.

For each dataset shape (default: 1M frames in 2,000 episodes of 300-700 frames; 1M frames in 20,000 episodes of 50;
~2M frames in 100,000 episodes of 10-30), it writes a synthetic LeRobot v3.0 dataset (state/action f32[14] and
LeRobot's five columns), transcodes it with ``lerobot_zarr.open_dataset`` at default settings, writes the floor
(``lerobot_zarr.testing.baseline.FlatMemmapSampler``: every feature one flat file written at once and memory-mapped
with huge pages advised, bisect on episode starts, windows inside an episode copied as one slice / one strided
block, clamped gathers only at edges) and times, in the same process, interleaved, on FRESH uniform random indices
each repeat (the same ones for both contenders):

- ``ds[i]`` and ``ds.get_batch(256)`` ours vs floor, with windows state [-1/fps, 0] and action [0..15]/fps;
- the same with 20 datasets open in one process (20 dataset objects over the store, 20 floors; each sample or
  batch from a random one of them);
- maps held (packs mapped x features, and the process's memory map count against ``vm.max_map_count``).

Targets at default settings: ``ds[i]`` <= 1.5x floor and ``get_batch`` <= 1.2x floor in every row. Also: an
equality check of ours against the floor (raises on mismatch), the open time of the store in a fresh process, and
on the first shape LeRobot itself: ``lerobot.datasets.lerobot_dataset.LeRobotDataset`` on the same folder when
``lerobot`` is importable (run with a LeRobot environment's Python and this checkout on ``PYTHONPATH``), else
LeRobot's ``__getitem__`` logic ported to numpy over HF ``datasets`` when that is (the ``bench`` extra); values
checked equal to ours, ``--no-lerobot`` skips it.

Run from the repository root:  .venv/bin/python benchmarks/bench_sampling.py [--shapes 2k,20k,100k] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

from lerobot_zarr.testing.baseline import FlatMemmapSampler

BATCH = 256
TARGET_ITEM, TARGET_BATCH = 1.5, 1.2
N_DATASETS = 20


def deltas() -> dict[str, list[float]]:
    return {"observation.state": [-1 / C.FPS, 0.0], "action": [k / C.FPS for k in range(16)]}


class LeRobotPath:
    """LeRobot's random access on the dataset folder: its own ``LeRobotDataset`` when lerobot is importable, else its
    ``__getitem__`` (v3.0, no video) over HF ``datasets`` with a numpy port of ``hf_transform_to_torch``."""

    def __init__(self, src: Path, cache_dir: Path):
        os.environ["HF_HUB_OFFLINE"] = "1"  # a local folder: nothing to ask the Hub
        try:
            from lerobot.datasets.lerobot_dataset import LeRobotDataset
        except ImportError:
            LeRobotDataset = None
        t0 = time.perf_counter()
        if LeRobotDataset is not None:
            import lerobot

            self.what = f"LeRobotDataset (lerobot {lerobot.__version__})"
            ds = LeRobotDataset("local/bench", root=src, delta_timestamps=deltas())
            self.item = lambda i: {k: v.numpy() if hasattr(v, "numpy") else v for k, v in ds[i].items()}
        else:
            import datasets
            import pandas as pd

            datasets.logging.set_verbosity_error()
            datasets.disable_progress_bars()
            self.what = f"LeRobot's __getitem__ over HF datasets {datasets.__version__} (lerobot not importable)"
            load = lambda files: datasets.load_dataset("parquet", data_files=[str(f) for f in files], split="train",
                                                       cache_dir=str(cache_dir))
            self.hf = load(C.data_files(src)).with_transform(_numpy_transform)
            episodes = load(sorted((src / "meta" / "episodes").glob("*/*.parquet")))
            self.episodes = episodes.select_columns([k for k in episodes.features if not k.startswith("stats/")])
            self.tasks = pd.read_parquet(src / "meta" / "tasks.parquet")
            self.item = self._hf_item
        self.load_s = time.perf_counter() - t0
        self.delta_indices = {k: [round(d * C.FPS) for d in v] for k, v in deltas().items()}

    def _hf_item(self, idx: int) -> dict:
        item = self.hf[idx]
        ep = self.episodes[int(item["episode_index"])]
        lo, hi = ep["dataset_from_index"], ep["dataset_to_index"]
        for key, delta_idx in self.delta_indices.items():
            item[f"{key}_is_pad"] = np.array([(idx + d < lo) | (idx + d >= hi) for d in delta_idx])
            item[key] = np.stack(self.hf[key][[max(lo, min(hi - 1, idx + d)) for d in delta_idx]])
        item["task"] = self.tasks.iloc[int(item["task_index"])].name
        return item


def _numpy_transform(items: dict) -> dict:
    """LeRobot's ``hf_transform_to_torch`` in numpy: floats become float32 as ``torch.tensor`` makes them."""
    for key, values in items.items():
        if values and not (values[0] is None or isinstance(values[0], str)):
            items[key] = [np.asarray(x).astype(np.float32) if np.asarray(x).dtype == np.float64 else np.asarray(x)
                          for x in values]
    return items


def lerobot_path(src: Path, cache_dir: Path) -> LeRobotPath | None:
    try:
        return LeRobotPath(src, cache_dir)
    except ImportError as exc:
        print(f"  LeRobot comparison skipped: neither lerobot nor datasets is importable ({exc})")
        return None


def assert_values(ours: dict, theirs: dict, where: str) -> None:
    """The same values (LeRobot gives tensors and 0-d arrays where we give numpy scalars)."""
    for k, v in ours.items():
        if k not in theirs:
            raise AssertionError(f"{where}: LeRobot has no {k!r}")
        if isinstance(v, str):
            if v != theirs[k]:
                raise AssertionError(f"{where}: {k!r}: {v!r} != {theirs[k]!r}")
        elif not np.array_equal(np.asarray(v), np.asarray(theirs[k]).reshape(np.shape(v))):
            raise AssertionError(f"{where}: {k!r} values differ")


def map_count() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def max_map_count() -> int:
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except OSError:
        return 65530


def assert_same(a: dict, b: dict, where: str) -> None:
    if set(a) != set(b):
        raise AssertionError(f"{where}: keys differ: {sorted(set(a) ^ set(b))}")
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, (str, list)):
            if x != y:
                raise AssertionError(f"{where}: {k!r}: {x!r} != {y!r}")
            continue
        xa, ya = np.asarray(x), np.asarray(y)
        if xa.dtype != ya.dtype or xa.shape != ya.shape or type(x) is not type(y) or not np.array_equal(xa, ya):
            raise AssertionError(f"{where}: {k!r}: {type(x).__name__} {xa.dtype}{xa.shape} vs "
                                 f"{type(y).__name__} {ya.dtype}{ya.shape}, or values differ")


def check_equal(ds, floor, start: np.ndarray, end: np.ndarray, rng: np.random.Generator) -> None:
    edges = []
    for e in rng.choice(len(start), size=min(10, len(start)), replace=False):
        s, t = int(start[e]), int(end[e])
        edges += [s, s + 1, t - 15, t - 2, t - 1]
    idx = [i for i in [*rng.integers(0, len(ds), 60).tolist(), *edges, 0, len(ds) - 1] if 0 <= i < len(ds)]
    for i in idx:
        assert_same(ds[i], floor[i], f"ds[{i}] vs floor")
    assert_same(ds.get_batch(idx), floor.get_batch(idx), "get_batch vs floor")


def timed_pairs(contenders: dict, make_indices, repeats: int) -> dict[str, list[float]]:
    """Interleaved repeats; each repeat draws fresh indices, the same for every contender."""
    times = {k: [] for k in contenders}
    for _ in range(repeats):
        work = make_indices()
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn(work)
            times[name].append(time.perf_counter() - t0)
    return times


OPEN_PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
import lerobot_zarr
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
ds = lerobot_zarr.LeRobotZarrDataset(sys.argv[1], delta_timestamps=json.loads(sys.argv[2]))
t_open = time.perf_counter() - t0
t0 = time.perf_counter(); ds[len(ds) // 2]; t_first = time.perf_counter() - t0
print(json.dumps({"import_s": t_import, "open_s": t_open, "first_s": t_first}))
"""


def open_probe(store: Path, runs: int = 5) -> dict:
    """Import, open and first-sample times of the store in ``runs`` fresh processes: the median of each (and the
    best open)."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    probes = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", OPEN_PROBE, str(store), json.dumps(deltas())], env=env,
                             capture_output=True, text=True, check=True)
        probes.append(json.loads(out.stdout.strip().splitlines()[-1]))
    median = {key: sorted(p[key] for p in probes)[runs // 2] for key in probes[0]}
    return {**median, "best_open_s": min(p["open_s"] for p in probes), "runs": runs}


def run_shape(work: Path, name: str, episodes: int, lengths: tuple[int, int], per_file: int, args) -> dict:
    import lerobot_zarr

    print(f"\n[{name}] {episodes:,} episodes of {lengths[0]}-{lengths[1]} frames")
    src = C.build_shape(work, name, episodes, lengths, per_file, args.seed)
    store, floor_dir = work / f"store-{name}", work / f"floor-{name}"
    t0 = time.perf_counter()
    ds = lerobot_zarr.open_dataset(src, root=store, delta_timestamps=deltas(), progress=False)
    print(f"  open_dataset (transcode if needed): {time.perf_counter() - t0:.1f} s, {len(ds):,} frames")
    start, end, tasks = C.read_episode_table(src)
    if not (floor_dir / "meta.json").exists():
        FlatMemmapSampler.write(floor_dir, C.read_columns(C.data_files(src)), start, end - start, tasks, C.FPS)
    if args.cold:  # both read from disk again, each through its own maps
        ds.close()
        C.drop_page_cache(store)
        C.drop_page_cache(floor_dir)
        ds = lerobot_zarr.LeRobotZarrDataset(store, delta_timestamps=deltas())
    floor = FlatMemmapSampler(floor_dir, deltas())
    check_equal(ds, floor, start, end, np.random.default_rng(args.seed + 1))
    n = len(ds)
    rng = np.random.default_rng(args.seed)

    def items(get):
        return lambda idx: [get(i) for i in idx]

    def batches(get_batch):
        return lambda bs: [get_batch(b) for b in bs]

    item_idx = lambda: rng.integers(0, n, args.items).tolist()
    batch_idx = lambda: [rng.integers(0, n, BATCH) for _ in range(args.batches)]
    for fn in (items(ds.__getitem__), items(floor.__getitem__)):  # warm-up: page cache, maps
        fn(item_idx())
    for fn in (batches(ds.get_batch), batches(floor.get_batch)):
        fn(batch_idx())
    t_item = timed_pairs({"ours": items(ds.__getitem__), "floor": items(floor.__getitem__)}, item_idx, args.repeats)
    t_batch = timed_pairs({"ours": batches(ds.get_batch), "floor": batches(floor.get_batch)}, batch_idx,
                          args.repeats)
    maps = ds._maps.n_mapped * len(ds._maps.specs)
    t_lerobot, lerobot_what = None, None
    if args.lerobot:
        ref = lerobot_path(src, work / f"hf-{name}")
        if ref is not None:
            for i in [0, n - 1, *rng.integers(0, n, 18).tolist()]:
                assert_values(ds[i], ref.item(i), f"ds[{i}] vs {ref.what}")
            k = args.lerobot_samples
            ref_idx = lambda: rng.integers(0, n, k).tolist()
            items(ref.item)(ref_idx())
            t_lerobot = timed_pairs({"ours": items(ds.__getitem__), "lerobot": items(ref.item)}, ref_idx,
                                    max(3, args.repeats // 2))
            lerobot_what = ref.what
            print(f"  {ref.what}: loaded in {ref.load_s:.1f} s; values equal to ours at 20 frames")

    # twenty datasets in one process: each sample (batch) from a random one of them
    many = [lerobot_zarr.LeRobotZarrDataset(store, delta_timestamps=deltas()) for _ in range(N_DATASETS)]
    floors = [FlatMemmapSampler(floor_dir, deltas()) for _ in range(N_DATASETS)]
    which = lambda k: rng.integers(0, N_DATASETS, k).tolist()

    def items_many(group):
        return lambda work: [group[d][i] for d, i in zip(*work, strict=True)]

    def batches_many(group):
        return lambda work: [group[d].get_batch(b) for d, b in zip(*work, strict=True)]

    many_items = lambda: (which(args.items), item_idx())
    many_batches = lambda: (which(args.batches), batch_idx())
    for fn in (items_many(many), items_many(floors)):
        fn(many_items())
    for fn in (batches_many(many), batches_many(floors)):
        fn(many_batches())
    m_item = timed_pairs({"ours": items_many(many), "floor": items_many(floors)}, many_items, args.repeats)
    m_batch = timed_pairs({"ours": batches_many(many), "floor": batches_many(floors)}, many_batches, args.repeats)
    maps_many = sum(d._maps.n_mapped * len(d._maps.specs) for d in many)
    process_maps = map_count()
    for d in many:
        d.close()
    probe = open_probe(store)
    return {"name": name, "episodes": episodes, "frames": n, "packs": int((ds._state.packs.rows > 0).sum()),
            "item": t_item, "batch": t_batch, "m_item": m_item, "m_batch": m_batch, "maps": maps,
            "maps_many": maps_many, "process_maps": process_maps, "probe": probe, "lerobot": t_lerobot,
            "lerobot_what": lerobot_what,
            "files": sum(1 for p in store.rglob("*") if p.is_file())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="2k,20k,100k", help=f"comma-separated among {', '.join(C.SHAPES)}")
    p.add_argument("--episodes", type=int, default=None, help="a custom shape: this many episodes ...")
    p.add_argument("--episode-frames", default=None, metavar="LO-HI", help="... of LO to HI frames (e.g. 10-30)")
    p.add_argument("--items", type=int, default=20000, help="ds[i] calls per repeat (default 20000)")
    p.add_argument("--batches", type=int, default=100, help=f"get_batch({BATCH}) calls per repeat (default 100)")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats, fresh indices each (default 7)")
    p.add_argument("--lerobot-samples", type=int, default=1000, help="ds[i] calls per repeat against LeRobot")
    p.add_argument("--no-lerobot", dest="lerobot", action="store_false", help="skip the LeRobot comparison")
    p.add_argument("--quick", action="store_true", help="fewer samples and repeats (a smoke run)")
    p.add_argument("--cold", action="store_true", help="evict the store and the floor from the page cache before "
                   "timing (as after a reboot; else both are as their writes left them)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out-dir", type=Path, default=None, help="work folder (kept; datasets and stores reused)")
    p.add_argument("--keep", action="store_true", help="keep the temporary work folder")
    args = p.parse_args()
    if args.quick:
        args.items, args.batches, args.repeats, args.lerobot_samples = 3000, 20, 3, 200
    warnings.filterwarnings("ignore")
    shapes = C.parse_shapes(args.shapes, args.episodes, args.episode_frames)
    print(f"bench_sampling: python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs; "
          f"vm.max_map_count {max_map_count():,}")
    with C.WorkDir(args, "bench_sampling-") as work:
        results = []
        for name, shape in shapes.items():
            results.append(run_shape(work, name, *shape, args))
            args.lerobot = False  # the first shape only: LeRobot's own cost does not depend on the episode count

    us = lambda ts, k: min(ts) / k * 1e6
    print(f"\nµs per sample, best of {args.repeats} interleaved repeats on fresh uniform random indices "
          f"(ds[i]: {args.items:,} per repeat; get_batch: {args.batches} x {BATCH})")
    head = (f"{'shape':<8}{'frames':>11}{'packs':>7}{'files':>7}  {'ds[i] ours/floor':>22}{'ratio':>7}"
            f"  {'get_batch ours/floor':>22}{'ratio':>7}  {'maps':>5}")
    print(head)
    worst = {"item": 0.0, "batch": 0.0}
    for r in results:
        for label, ti, tb, maps in (("", r["item"], r["batch"], r["maps"]),
                                    (f" x{N_DATASETS}", r["m_item"], r["m_batch"], r["maps_many"])):
            oi, fi = us(ti["ours"], args.items), us(ti["floor"], args.items)
            ob, fb = us(tb["ours"], args.batches * BATCH), us(tb["floor"], args.batches * BATCH)
            worst["item"], worst["batch"] = max(worst["item"], oi / fi), max(worst["batch"], ob / fb)
            print(f"{r['name'] + label:<8}{r['frames']:>11,}{r['packs']:>7}{r['files']:>7}  "
                  f"{oi:>10.2f} / {fi:<9.2f}{oi / fi:>6.2f}x  {ob:>10.3f} / {fb:<9.3f}{ob / fb:>6.2f}x  {maps:>5}")
    print(f"\nworst ratios: ds[i] {worst['item']:.2f}x (target <= {TARGET_ITEM}x: "
          f"{'met' if worst['item'] <= TARGET_ITEM else 'MISSED'}), get_batch {worst['batch']:.2f}x (target <= "
          f"{TARGET_BATCH}x: {'met' if worst['batch'] <= TARGET_BATCH else 'MISSED'})")
    for r in results:
        if r["lerobot"]:
            k = args.lerobot_samples
            o, t = us(r["lerobot"]["ours"], k), us(r["lerobot"]["lerobot"], k)
            print(f"[{r['name']}] ds[i] vs {r['lerobot_what']}: {t:.1f} µs vs ours {o:.2f} µs per sample: "
                  f"ours {t / o:.0f}x faster")
    limit = max_map_count()
    for r in results:
        print(f"[{r['name']}] maps held: one dataset {r['maps']}, {N_DATASETS} datasets {r['maps_many']} "
              f"({r['maps_many'] / limit:.2%} of vm.max_map_count; the process had {r['process_maps']:,} maps in "
              f"all, {r['process_maps'] / limit:.1%}); fresh process (median of {r['probe']['runs']}): import "
              f"{r['probe']['import_s'] * 1e3:.0f} ms, open {r['probe']['open_s'] * 1e3:.1f} ms (best "
              f"{r['probe']['best_open_s'] * 1e3:.1f}), first ds[i] {r['probe']['first_s'] * 1e3:.1f} ms; load "
              f"average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
