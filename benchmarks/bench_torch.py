"""Torch DataLoader throughput vs bare ``ds.get_batch`` in the same process (needs torch; skipped without it).

Dataset: the synthetic LeRobot v3.0 dataset of the other benchmarks (state/action f32[14], default 200 episodes
of 300-700 frames here), sample spec ``delta_timestamps = {"observation.state": [-1/fps, 0], "action":
[k/fps for k in 0..15]}``. One "epoch" is ``--batches`` batches of ``--batch-size`` random indices. Contenders,
interleaved over ``--repeats`` (best and median samples/s):

- ``get_batch``: ``ds.get_batch(idx)`` on the same index batches, numpy out (the reference);
- ``batch_loader(workers=0|2)``: :func:`lerobot_zarr.torch.batch_loader` (a ``BatchSampler`` handing whole
  index batches to the dataset, ``batch_size=None``: one ``get_batch`` per batch, turned into tensors);
- ``DataLoader(TorchDataset, batch_size=B)``: the per-item path (``__getitems__`` splits one ``get_batch`` into
  items, which the default collate stacks again).

Worker start-up is excluded (``persistent_workers=True``, one warm-up epoch). Targets: batch_loader at 0 workers
at least 0.5x get_batch; at 2 workers not slower than at 0. ``--camera raw|compact`` adds a 64x64 RGB camera
(PNG in the source; ``compact``: zstd per frame in the store, so each sample costs a decompression): heavier
batches, where worker processes can pay for shipping their results back.

Run:  .venv/bin/python benchmarks/bench_torch.py [--episodes 200] [--batch-size 256]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from _common import FPS, WorkDir, add_dataset_args, best, build_dataset, interleaved, median, n_episodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dataset_args(parser)
    parser.set_defaults(episodes=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=200, help="batches per timed epoch")
    parser.add_argument("--repeats", type=int, default=5)
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
            from lerobot_zarr.sample_data import write_sample_dataset

            cam = "observation.images.cam"
            src = write_sample_dataset(work / "camera_dataset", n_episodes=n_episodes(args), lengths=(300, 700),
                                       fps=FPS, seed=args.seed, state_dim=14, action_dim=14, image_keys=(cam,),
                                       image_shape=(64, 64, 3), episodes_per_file=args.episodes_per_file)
            ds = lerobot_zarr.open_dataset(src, root=work / f"store_{args.camera}", delta_timestamps=deltas,
                                           storage={cam: args.camera}, progress=False)
        n, bs = args.batches, args.batch_size
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
                                                       persistent_workers=w > 0)
            for w in (0, 2)
        }
        loaders["DataLoader(TorchDataset, batch_size)"] = torch.utils.data.DataLoader(
            TorchDataset(ds), batch_size=bs, sampler=Fixed(), num_workers=0)
        check = next(iter(loaders["batch_loader(workers=2)"]))
        want = ds.get_batch(order[0])
        for key in ("action", "observation.state_is_pad", "index"):
            if not np.array_equal(check[key].numpy(), want[key]):
                raise RuntimeError(f"bench_torch: {key} from the loader differs from get_batch")

        def epoch(loader) -> None:
            for _ in loader:
                pass

        fns = {"get_batch": lambda: [ds.get_batch(b) for b in order]}
        fns.update({name: (lambda ld=ld: epoch(ld)) for name, ld in loaders.items()})
        for fn in fns.values():  # warm-up: page cache, maps, worker start
            fn()
        times = interleaved(fns, args.repeats)
        samples = n * bs
        rate = {k: samples / best(v) for k, v in times.items()}
        print(f"\n{len(ds):,} frames, {n} batches of {bs}, best (median) of {args.repeats}, samples/s:")
        for name, ts in times.items():
            print(f"  {name:<40}{rate[name]:>12,.0f} ({samples / median(ts):,.0f})"
                  f"{rate[name] / rate['get_batch']:>8.2f}x of get_batch")
        r0, r2 = rate["batch_loader(workers=0)"], rate["batch_loader(workers=2)"]
        print(f"\n  batch_loader(0) / get_batch: {r0 / rate['get_batch']:.2f}x (target >= 0.5x)")
        print(f"  batch_loader(2) / batch_loader(0): {r2 / r0:.2f}x (target >= 1x)")
        print(f"  batch_loader(0) / per-item DataLoader: {r0 / rate['DataLoader(TorchDataset, batch_size)']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
