"""Torch DataLoader throughput vs bare ``ds.get_batch`` in the same process (needs torch; skipped without it).

Dataset: the synthetic LeRobot v3.0 dataset of the other benchmarks (state/action f32[14], default 200 episodes
of 300-700 frames here), sample spec ``delta_timestamps = {"observation.state": [-1/fps, 0], "action":
[k/fps for k in 0..15]}``. One "epoch" is ``--batches`` batches of ``--batch-size`` random indices. Contenders,
interleaved over ``--repeats`` (best and median samples/s):

- ``get_batch``: ``ds.get_batch(idx)`` on the same index batches, numpy out (the reference);
- ``batch_loader(workers=0|N)``: :func:`lerobot_zarr.torch.batch_loader` (a ``BatchSampler`` handing whole
  index batches to the dataset, ``batch_size=None``: one ``get_batch`` per batch, turned into tensors; with
  workers, batches cross to the main process through each worker's shared-memory ring);
- ``DataLoader(TorchDataset, batch_size)``: the per-item path (``__getitems__`` splits one ``get_batch`` into
  items, which the default collate stacks again).

Worker start-up is excluded (``persistent_workers=True``, one warm-up epoch). Targets: batch_loader at 0 workers
at least 0.5x get_batch; at N workers not slower than at 0. Besides wall time it reports CPU per batch of the main
process and of the workers (Linux), and the load average before and after: the machine's other tenants decide
how much of the workers' extra CPU turns into speed. ``--camera raw|compact`` adds a 64x64 RGB camera (PNG in
the source; ``compact``: zstd per frame in the store, so each sample costs a decompression).

Run:  .venv/bin/python benchmarks/bench_torch.py [--episodes 200] [--batch-size 256] [--camera raw]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from _common import FPS, WorkDir, add_dataset_args, best, build_dataset, median, n_episodes


def children_cpu() -> float:
    """CPU seconds used so far by this process's live children (the DataLoader workers); 0 off Linux."""
    total = 0.0
    for child in multiprocessing.active_children():
        try:
            fields = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def timed(fns: dict, repeats: int) -> dict[str, list[tuple[float, float, float]]]:
    """Each fn ``repeats`` times, interleaved (A B C A B C ...) so that the VM's noise hits every contender alike:
    (wall s, main-process CPU s, workers' CPU s) per run."""
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            w0, c0, t0 = children_cpu(), time.process_time(), time.perf_counter()
            fn()
            runs[name].append((time.perf_counter() - t0, time.process_time() - c0, children_cpu() - w0))
    return runs


def camera_dataset(work: Path, args) -> Path:
    """The camera dataset, written once per parameters (reused from ``--out-dir``)."""
    from lerobot_zarr.sample_data import write_sample_dataset

    src, marker = work / "camera_dataset", work / "camera_dataset.params.json"
    params = {"episodes": n_episodes(args), "seed": args.seed, "episodes_per_file": args.episodes_per_file}
    if src.exists() and marker.exists() and json.loads(marker.read_text()) == params:
        return src
    shutil.rmtree(src, ignore_errors=True)
    write_sample_dataset(src, n_episodes=n_episodes(args), lengths=(300, 700), fps=FPS, seed=args.seed,
                         state_dim=14, action_dim=14, image_keys=("observation.images.cam",), image_shape=(64, 64, 3),
                         episodes_per_file=args.episodes_per_file)
    marker.write_text(json.dumps(params))
    return src


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dataset_args(parser)
    parser.set_defaults(episodes=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=200, help="batches per timed epoch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2, help="workers of the multi-process contender (default 2)")
    parser.add_argument("--batches-per-request", type=int, default=None,
                        help="batch_loader's batches per worker request (default: its own choice)")
    parser.add_argument("--camera", choices=("none", "raw", "compact"), default="none",
                        help="add a 64x64 camera, stored raw or compact (default none)")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("bench_torch: torch is not installed; skipped (pip install 'lerobot_zarr[torch]')")
        return 0
    import lerobot_zarr
    from lerobot_zarr.torch import TorchDataset, batch_loader

    torch.set_num_threads(1)
    with WorkDir(args, "lerobot_zarr-bench-torch-") as work:
        deltas = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(16)]}
        if args.camera == "none":
            src, _ = build_dataset(work, n_episodes(args), args.episodes_per_file, args.seed)
            ds = lerobot_zarr.open_dataset(src, root=work / "store", delta_timestamps=deltas, progress=False)
        else:
            ds = lerobot_zarr.open_dataset(camera_dataset(work, args), root=work / f"store_{args.camera}",
                                           delta_timestamps=deltas, storage={"observation.images.cam": args.camera},
                                           progress=False)
        n, bs, nw = args.batches, args.batch_size, args.workers
        rng = np.random.default_rng(args.seed)
        order = [rng.integers(0, len(ds), bs) for _ in range(n)]
        flat = np.concatenate(order).tolist()

        class Fixed(torch.utils.data.Sampler):
            """The same index batches for every contender."""

            def __len__(self) -> int:
                return len(flat)

            def __iter__(self):
                return iter(flat)

        loaders = {
            f"batch_loader(workers={w})": batch_loader(ds, bs, sampler=Fixed(), num_workers=w,
                                                       persistent_workers=w > 0,
                                                       batches_per_request=args.batches_per_request if w else None)
            for w in (0, nw)
        }
        loaders["DataLoader(TorchDataset, batch_size)"] = torch.utils.data.DataLoader(
            TorchDataset(ds), batch_size=bs, sampler=Fixed(), num_workers=0)
        for got, idx in zip(loaders[f"batch_loader(workers={nw})"], order[:3], strict=False):
            want = ds.get_batch(idx)
            for key, value in want.items():
                if key != "task" and not np.array_equal(got[key].numpy(), value):
                    raise RuntimeError(f"bench_torch: {key} from the loader differs from get_batch")

        def epoch(loader) -> None:
            for _ in loader:
                pass

        fns = {"get_batch": lambda: [ds.get_batch(b) for b in order]}
        fns.update({name: (lambda ld=ld: epoch(ld)) for name, ld in loaders.items()})
        for fn in fns.values():  # warm-up: page cache, maps, worker start
            fn()
        load0 = os.getloadavg()
        runs = timed(fns, args.repeats)
        load1 = os.getloadavg()
        samples = n * bs
        rate = {k: samples / best([r[0] for r in v]) for k, v in runs.items()}
        print(f"\n{len(ds):,} frames, {n} batches of {bs}, best (median) of {args.repeats}; CPU per batch in the "
              f"best run (main process / workers); load average {load0[0]:.2f} before, {load1[0]:.2f} after:")
        for name, rs in runs.items():
            _, main_cpu, workers_cpu = min(rs)
            print(f"  {name:<38}{rate[name]:>11,.0f}/s ({samples / median([r[0] for r in rs]):>9,.0f})"
                  f"{rate[name] / rate['get_batch']:>6.2f}x   CPU {main_cpu / n * 1e6:5.0f} / "
                  f"{workers_cpu / n * 1e6:4.0f} us")
        r0, rn = rate["batch_loader(workers=0)"], rate[f"batch_loader(workers={nw})"]
        print(f"\n  batch_loader(0) / get_batch: {r0 / rate['get_batch']:.2f}x (target >= 0.5x)")
        print(f"  batch_loader({nw}) / batch_loader(0): {rn / r0:.2f}x (target >= 1x)")
        print(f"  batch_loader(0) / per-item DataLoader: {r0 / rate['DataLoader(TorchDataset, batch_size)']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
