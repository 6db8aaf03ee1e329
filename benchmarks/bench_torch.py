"""Torch DataLoader throughput vs bare ``ds.get_batch`` in the same process (needs torch; skipped without it).

Dataset: the synthetic LeRobot v3.0 dataset of the other benchmarks (state/action f32[14], default 200 episodes
of 300-700 frames here), sample spec ``delta_timestamps = {"observation.state": [-1/fps, 0], "action":
[k/fps for k in 0..15]}``. One "epoch" is ``--batches`` batches of ``--batch-size`` random indices, drawn as users
run each contender (fresh shuffled batches each time: ``IndexBatches`` for ``get_batch`` and ``batch_loader``, a
DataLoader's ``shuffle=True`` for the others). Contenders, interleaved over ``--repeats`` (best and median
samples/s):

- ``get_batch``: ``ds.get_batch(idx)`` on the same index batches, numpy out (the reference);
- ``batch_loader(workers=0|N)``: :func:`lerobot_zarr.torch.batch_loader` (a ``BatchSampler`` handing whole
  index batches to the dataset, ``batch_size=None``: one ``get_batch`` per batch, turned into tensors; with
  workers, batches cross to the main process through each worker's shared-memory ring);
- ``DataLoader(TorchDataset, batch_size)``: a plain DataLoader over the adapter (torch's batched fetch
  ``__getitems__``: one ``get_batch`` whose items ``default_collate`` stacks back);
- ``drop-in, DataLoader(workers=0|N)``: what a LeRobot user gets by swapping the import
  (``from lerobot_zarr.torch import LeRobotDataset``) and keeping ``DataLoader(ds, batch_size=B)``.

Then a small training loop (``--steps`` steps of an MLP from the state window to the action chunk, Adam, one
thread): steps/s with data from LeRobot's own ``LeRobotDataset`` in the same plain DataLoader (when lerobot is
importable; ``--lerobot-steps``), from the drop-in and from ``batch_loader`` (0 and N workers each), and compute
only (the same batch every step): the ceiling.

Worker start-up is excluded (``persistent_workers=True``, one warm-up epoch). Targets: batch_loader at 0 workers
at least 0.9x get_batch; the drop-in in a plain DataLoader at least 0.5x batch_loader; at N workers not slower
than at 0. Besides wall time it reports CPU per batch of the main process and of the workers (Linux), and the
load average before and after: the machine's other tenants decide how much of the workers' extra CPU turns into
speed. ``--camera raw|compact`` adds a 64x64 RGB camera (PNG in the source; ``compact``: zstd per frame in the
store, so each sample costs a decompression).

Run:  .venv/bin/python benchmarks/bench_torch.py [--episodes 200] [--batch-size 256] [--camera raw] [--quick]
      PYTHONPATH=. <lerobot-env>/bin/python benchmarks/bench_torch.py     # with LeRobot's training-loop row
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import shutil
import sys
import time
import warnings
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
    from lerobot_zarr.testing.sample_data import write_sample_dataset

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
    parser.add_argument("--steps", type=int, default=300, help="training-loop steps per contender (default 300)")
    parser.add_argument("--lerobot-steps", type=int, default=15, help="training-loop steps with LeRobot's dataset")
    parser.add_argument("--quick", action="store_true", help="fewer batches, repeats and steps (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.batches, args.repeats, args.steps, args.lerobot_steps = 60, 3, 60, 4
    try:
        import torch
    except ImportError:
        print("bench_torch: torch is not installed; skipped (pip install 'lerobot_zarr[torch]')")
        return 0
    import lerobot_zarr
    from lerobot_zarr.torch import IndexBatches, LeRobotDataset, TorchDataset, batch_loader

    torch.set_num_threads(1)
    with WorkDir(args, "lerobot_zarr-bench-torch-") as work:
        deltas = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(16)]}
        if args.camera == "none":
            src, _ = build_dataset(work, n_episodes(args), args.episodes_per_file, args.seed)
            store = work / "store"
            ds = lerobot_zarr.open_dataset(src, root=store, delta_timestamps=deltas, progress=False)
        else:
            src, store = camera_dataset(work, args), work / f"store_{args.camera}"
            ds = lerobot_zarr.open_dataset(src, root=store, delta_timestamps=deltas,
                                           storage={"observation.images.cam": args.camera}, progress=False)
        dropin = LeRobotDataset("local/bench", root=src, delta_timestamps=deltas, store=str(store))
        n, bs, nw = args.batches, args.batch_size, args.workers
        # every contender as users run it, on fresh shuffled batches each epoch (the same distribution):
        # batch_loader's own sampler (IndexBatches), a plain DataLoader's RandomSampler in batches of bs
        loaders = {
            f"batch_loader(workers={w})": batch_loader(ds, bs, shuffle=True, num_workers=w, persistent_workers=w > 0,
                                                       batches_per_request=args.batches_per_request if w else None)
            for w in (0, nw)
        }
        loaders["DataLoader(TorchDataset, batch_size)"] = torch.utils.data.DataLoader(
            TorchDataset(ds), batch_size=bs, shuffle=True, num_workers=0)
        for w in (0, nw):
            loaders[f"drop-in, DataLoader(workers={w})"] = torch.utils.data.DataLoader(
                dropin, batch_size=bs, shuffle=True, num_workers=w, persistent_workers=w > 0)
        for name, loader in loaders.items():  # each loader's first batches are get_batch of their indices
            for got in itertools.islice(loader, 2):
                want = ds.get_batch(got["index"].numpy() - int(ds.meta.episode_start[0]))
                for key, value in want.items():
                    if key != "task" and not np.array_equal(got[key].numpy().reshape(value.shape), value):
                        raise RuntimeError(f"bench_torch: {key} from {name} differs from get_batch")

        def epoch(loader) -> None:
            for _ in itertools.islice(loader, n):
                pass

        fns = {"get_batch": lambda: [ds.get_batch(b) for b in itertools.islice(IndexBatches(len(ds), bs), n)]}
        fns.update({name: (lambda ld=ld: epoch(ld)) for name, ld in loaders.items()})
        for fn in fns.values():  # warm-up: page cache, maps, worker start
            fn()
        load0 = os.getloadavg()
        runs = timed(fns, args.repeats)
        load1 = os.getloadavg()
        samples = n * bs
        rate = {k: samples / best([r[0] for r in v]) for k, v in runs.items()}
        cpu = {k: min(v)[1] + min(v)[2] for k, v in runs.items()}
        print(f"\n{len(ds):,} frames, {n} batches of {bs}, best (median) of {args.repeats}; CPU per batch in the "
              f"best run (main process / workers); load average {load0[0]:.2f} before, {load1[0]:.2f} after:")
        for name, rs in runs.items():
            _, main_cpu, workers_cpu = min(rs)
            print(f"  {name:<38}{rate[name]:>11,.0f}/s ({samples / median([r[0] for r in rs]):>9,.0f})"
                  f"{rate[name] / rate['get_batch']:>6.2f}x   CPU {main_cpu / n * 1e6:5.0f} / "
                  f"{workers_cpu / n * 1e6:4.0f} us")
        r0, rn = rate["batch_loader(workers=0)"], rate[f"batch_loader(workers={nw})"]
        d0, dn = rate["drop-in, DataLoader(workers=0)"], rate[f"drop-in, DataLoader(workers={nw})"]
        print(f"\n  batch_loader(0) / get_batch: {r0 / rate['get_batch']:.2f}x (target >= 0.9x)")
        print(f"  batch_loader({nw}) / batch_loader(0): {rn / r0:.2f}x (target >= 1x)")
        print(f"  drop-in in a plain DataLoader(0) / batch_loader(0): {d0 / r0:.2f}x (target >= 0.5x)")
        print(f"  drop-in DataLoader({nw}) / DataLoader(0): {dn / d0:.2f}x (target >= 1x)")
        print(f"  by CPU per batch (less sensitive to the other tenants, in-process rows): batch_loader(0) / get_batch "
              f"{cpu['get_batch'] / cpu['batch_loader(workers=0)']:.2f}x, drop-in(0) / batch_loader(0) "
              f"{cpu['batch_loader(workers=0)'] / cpu['drop-in, DataLoader(workers=0)']:.2f}x")
        training_loop(torch, ds, dropin, src, deltas, args)
    return 0


def training_loop(torch, ds, dropin, src: Path, deltas: dict, args) -> None:
    """Steps/s of a small policy's training loop fed by each loader, and with compute only (the ceiling)."""
    from lerobot_zarr.torch import batch_loader

    state_in = int(np.prod(ds.get_batch([0])["observation.state"].shape[1:]))
    action_out = int(np.prod(ds.get_batch([0])["action"].shape[1:]))
    torch.manual_seed(0)
    torch.set_flush_denormal(True)  # (steps on one batch drive the gradients into denormals, slow on x86 otherwise)
    warnings.filterwarnings("ignore", message="The value of the smallest subnormal")  # (numpy's finfo, then)
    model = torch.nn.Sequential(torch.nn.Linear(state_in, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, action_out))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(batch) -> None:
        x = batch["observation.state"].reshape(len(batch["observation.state"]), -1)
        y = batch["action"].reshape(len(x), -1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    class Feed:
        """A loader's batches for ever (a new epoch when one ends), its first batch taken (warm-up)."""

        def __init__(self, loader):
            self.loader, self.it = loader, iter(loader)
            step(self.next())

        def next(self):
            try:
                return next(self.it)
            except StopIteration:
                self.it = iter(self.loader)
                return next(self.it)

    def timed_steps(feed: Feed, steps: int) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            step(feed.next())
        return time.perf_counter() - t0

    bs, nw = args.batch_size, args.workers
    fixed = next(iter(batch_loader(ds, bs)))
    contenders = {
        "compute only (one batch, the ceiling)": lambda: _Repeat(fixed),
        "batch_loader(workers=0)": lambda: batch_loader(ds, bs),
        f"batch_loader(workers={nw})": lambda: batch_loader(ds, bs, num_workers=nw, persistent_workers=True),
        "drop-in, DataLoader(workers=0)": lambda: torch.utils.data.DataLoader(dropin, batch_size=bs, shuffle=True),
        f"drop-in, DataLoader(workers={nw})": lambda: torch.utils.data.DataLoader(
            dropin, batch_size=bs, shuffle=True, num_workers=nw, persistent_workers=True),
    }
    try:
        import logging

        logging.getLogger("lerobot.utils.import_utils").setLevel(logging.ERROR)  # (its video decoders: not used)
        from lerobot.datasets.lerobot_dataset import LeRobotDataset as Reference
    except ImportError:
        Reference = None
    if Reference is not None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        reference = Reference("local/bench", root=src, delta_timestamps=deltas)
        contenders["LeRobot's LeRobotDataset, DataLoader(workers=0)"] = lambda: torch.utils.data.DataLoader(
            reference, batch_size=bs, shuffle=True)
    feeds = {name: Feed(make()) for name, make in contenders.items()}
    rounds = 10  # contenders interleaved round by round (the other tenants' noise hits every one alike): the median
    per_round: dict[str, list[float]] = {name: [] for name in feeds}  # of the rounds' steps/s
    load0 = os.getloadavg()
    for _ in range(rounds):
        for name, feed in feeds.items():
            k = max(1, (args.lerobot_steps if name.startswith("LeRobot") else args.steps) // rounds)
            per_round[name].append(k / timed_steps(feed, k))
    load1 = os.getloadavg()
    rates = {name: median(r) for name, r in per_round.items()}
    ceiling = rates["compute only (one batch, the ceiling)"]
    print(f"\ntraining loop (MLP {state_in} -> 256 -> 256 -> {action_out}, Adam, batch {bs}; {args.steps} steps, "
          f"LeRobot {args.lerobot_steps}, in {rounds} interleaved rounds: median steps/s); load average "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after:")
    for name, r in rates.items():
        print(f"  {name:<52}{r:>9.1f} steps/s  {r / ceiling:>5.2f} of the ceiling")
    for what, zero in (("batch_loader", "batch_loader(workers=0)"), ("drop-in", "drop-in, DataLoader(workers=0)")):
        many = zero.replace("workers=0", f"workers={nw}")
        rounds_ratio = sorted(a / b for a, b in zip(per_round[many], per_round[zero], strict=True))
        print(f"  {what}: {nw} workers / 0 workers {rates[many] / rates[zero]:.2f}x (target >= 1x; per round "
              f"{rounds_ratio[0]:.2f}-{rounds_ratio[-1]:.2f}x)")
    if Reference is None:
        print("  (LeRobot's row skipped: lerobot is not importable here)")
    else:
        lerobot = rates["LeRobot's LeRobotDataset, DataLoader(workers=0)"]
        print(f"  drop-in / LeRobot: {rates['drop-in, DataLoader(workers=0)'] / lerobot:.0f}x; batch_loader / "
              f"LeRobot: {rates['batch_loader(workers=0)'] / lerobot:.0f}x")


class _Repeat:
    """The same batch for ever (compute only)."""

    def __init__(self, batch):
        self.batch = batch

    def __iter__(self):
        while True:
            yield self.batch


if __name__ == "__main__":
    sys.exit(main())
