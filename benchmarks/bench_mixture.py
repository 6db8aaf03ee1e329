"""Mixtures: the cost of sampling several datasets as one, against sampling one dataset, in the same run.

Builds one synthetic LeRobot v3.0 dataset (default 400 episodes of 300-700 frames, ``observation.state`` and
``action`` f32[14]), transcodes it, and gives it 19 more names (hard-linked copies of the store: 20 datasets that
each open, map and sample on their own, sharing the page cache). Sample spec: ``delta_timestamps =
{"observation.state": [-1/fps, 0], "action": [k/fps for k in 0..15]}``. Rows:

- ``get_batch(256)``: one dataset (fresh sorted uniform indices each repeat) against a mixture of 3 (weights
  0.5/0.3/0.2) and of 20 datasets (equal weights), each batch the next one of the mixture's sampler; and
  ``get_batches`` of 8 batches at once, per batch;
- the sampler's own cost per batch (iterating it, nothing gathered) against the mixture's ``get_batch``, on 1 rank
  and on rank 3 of 8;
- ``load_state_dict`` of a state saved at step 10^6 (alone, and with the first batch after it);
- ``lerobot_zarr.torch.batch_loader`` on a mixture against on one dataset, 0 and 2 workers (when torch imports);
- a stream's ``load_state_dict`` half-way through an epoch: the draws it replays on episode lengths, per second.

Contenders are interleaved repeat by repeat (noise hits them alike); ratios are of medians, with the machine's load
average printed. Nothing is asserted on timings.

Run (from the repository root):  .venv/bin/python benchmarks/bench_mixture.py [--episodes 400] [--repeats 200]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import FPS, WorkDir, add_dataset_args, best, build_dataset, interleaved, median, n_episodes  # noqa: E402

import lerobot_zarr  # noqa: E402

DELTAS = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(16)]}
BATCH = 256


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def linked_copy(store: Path, to: Path) -> Path:
    """Another name for the same store (hard links; a plain copy across filesystems)."""
    if not to.exists():
        try:
            shutil.copytree(store, to, copy_function=os.link)
        except OSError:
            shutil.rmtree(to, ignore_errors=True)
            shutil.copytree(store, to)
    return to


def us(seconds: float) -> str:
    return f"{seconds * 1e6:9.1f} µs"


def row(name: str, times: list[float], base: list[float] | None = None) -> None:
    ratio = (f"   {best(times) / best(base):5.2f}x (best) {median(times) / median(base):5.2f}x (median)"
             if base is not None else "")
    print(f"  {name:<34} best {us(best(times))}  median {us(median(times))}{ratio}")


def bench_get_batch(one, mixes: dict, repeats: int, rng: np.random.Generator) -> dict[str, list[float]]:
    n = len(one)
    feeds = {"one": iter([np.sort(rng.integers(0, n, BATCH)) for _ in range(repeats + 20)])}
    for k, mix in mixes.items():
        feeds[f"mix{k}"] = iter(list(itertools.islice(mix.batches_for_bench, repeats + 20)))
    for _ in range(20):  # warm-up: maps and page cache
        one.get_batch(next(feeds["one"]))
        for k, mix in mixes.items():
            mix.get_batch(next(feeds[f"mix{k}"]))
    fns = {"one": lambda: one.get_batch(next(feeds["one"]))}
    for k, mix in mixes.items():
        fns[f"mix{k}"] = (lambda m, f: lambda: m.get_batch(next(f)))(mix, feeds[f"mix{k}"])
    return interleaved(fns, repeats)


def bench_get_batches(one, mixes: dict, repeats: int, rng: np.random.Generator) -> dict[str, list[float]]:
    n, group = len(one), 8
    feeds = {"one": iter([[np.sort(rng.integers(0, n, BATCH)) for _ in range(group)] for _ in range(repeats + 3)])}
    for k, mix in mixes.items():
        batches = list(itertools.islice(mix.batches_for_bench, group * (repeats + 3)))
        feeds[f"mix{k}"] = iter([batches[i:i + group] for i in range(0, len(batches), group)])
    fns = {"one": lambda: [one.get_batch(b) for b in next(feeds["one"])]}
    for k, mix in mixes.items():
        fns[f"mix{k}"] = (lambda m, f: lambda: m.get_batches(next(f)))(mix, feeds[f"mix{k}"])
    for fn in fns.values():
        fn()
    times = interleaved(fns, repeats)
    return {name: [t / group for t in ts] for name, ts in times.items()}


def bench_sampler(mix, world_size: int, batches: int) -> float:
    """CPU seconds per batch of iterating the sampler (epoch after epoch), nothing gathered: best of 3."""
    costs = []
    for _ in range(3):
        sampler = mix.sampler(BATCH, seed=1, rank=min(3, world_size - 1), world_size=world_size)
        got = 0
        t0 = time.process_time()
        while got < batches:
            for _ in sampler:
                got += 1
                if got == batches:
                    break
        costs.append((time.process_time() - t0) / batches)
    return min(costs)


def bench_restore(mix, repeats: int) -> tuple[list[float], list[float]]:
    state = mix.sampler(BATCH, seed=1, rank=3, world_size=8).state_dict()
    state["position"] = 10 ** 6 * BATCH * 8  # step 10^6 of batches of 256 on 8 ranks
    alone, with_batch = [], []
    for _ in range(repeats):
        sampler = mix.sampler(BATCH, seed=1, rank=3, world_size=8)
        t0 = time.perf_counter()
        sampler.load_state_dict(state)
        t1 = time.perf_counter()
        next(iter(sampler))
        t2 = time.perf_counter()
        alone.append(t1 - t0)
        with_batch.append(t2 - t0)
    return alone, with_batch


def bench_torch(one, mixes: dict, batches: int) -> None:
    try:
        from lerobot_zarr.torch import batch_loader
    except ImportError:
        print("  (torch is not importable here: run with a Python that has it, this checkout on PYTHONPATH)")
        return
    for workers in (0, 2):
        rates = {}
        for name, source in {"one": one, **{f"mix{k}": mix for k, mix in mixes.items()}}.items():
            loader = batch_loader(source, BATCH, num_workers=workers)
            it = iter(loader)
            for _ in range(5):  # warm-up: workers started, maps made
                next(it)
            t0 = time.perf_counter()
            for _ in range(batches):
                next(it)
            rates[name] = batches / (time.perf_counter() - t0)
            del it, loader
        base = rates["one"]
        text = ", ".join(f"{name} {rate:7.0f} batches/s ({base / rate:4.2f}x the time of one)" if name != "one"
                         else f"one {rate:7.0f} batches/s" for name, rate in rates.items())
        print(f"  batch_loader, {workers} workers: {text}")


def bench_stream_resume(store: Path) -> None:
    s = lerobot_zarr.stream(store, seed=0)
    half = len(s) // 2
    state = s.state_at(0, half)
    again = lerobot_zarr.stream(store, seed=0)
    t0 = time.perf_counter()
    again.load_state_dict(state)
    next(iter(again))
    elapsed = time.perf_counter() - t0
    print(f"  stream load_state_dict half-way through an epoch ({half:,} samples replayed on lengths) + first "
          f"sample: {elapsed:.2f} s ({half / elapsed / 1e6:.2f} M draws/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dataset_args(parser)
    parser.set_defaults(episodes=400)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--sampler-batches", type=int, default=2000)
    parser.add_argument("--loader-batches", type=int, default=200)
    args = parser.parse_args()
    print(f"start: {load()}, {os.cpu_count()} CPUs")
    with WorkDir(args, "lerobot_zarr-bench-mixture-") as work:
        src, _ = build_dataset(work, n_episodes(args), args.episodes_per_file, args.seed)
        store = lerobot_zarr.open_dataset(src, root=work / "store", progress=False).root
        copies = [store] + [linked_copy(store, work / "copies" / f"ds{k:02d}") for k in range(1, 20)]
        one = lerobot_zarr.LeRobotZarrDataset(store, delta_timestamps=DELTAS)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", lerobot_zarr.LeRobotZarrWarning)
            mixes = {3: lerobot_zarr.open_mixture({str(copies[0]): 0.5, str(copies[1]): 0.3, str(copies[2]): 0.2},
                                                  delta_timestamps=DELTAS),
                     20: lerobot_zarr.open_mixture([str(c) for c in copies], delta_timestamps=DELTAS)}
        for mix in mixes.values():
            mix.batches_for_bench = itertools.chain.from_iterable(itertools.repeat(mix.sampler(BATCH, seed=0)))
        print(f"one dataset: {len(one):,} frames in {one.num_episodes} episodes; mixtures of 3 and 20 of them")
        rng = np.random.default_rng(args.seed)

        print(f"\nget_batch({BATCH}), {args.repeats} repeats interleaved ({load()})")
        times = bench_get_batch(one, mixes, args.repeats, rng)
        for name, ts in times.items():
            row(name if name == "one" else f"mixture of {name[3:]}", ts, None if name == "one" else times["one"])
        print(f"\nget_batches(8 x {BATCH}), per batch ({load()})")
        many = bench_get_batches(one, mixes, max(10, args.repeats // 8), rng)
        for name, ts in many.items():
            row("one (get_batch each)" if name == "one" else f"mixture of {name[3:]}", ts,
                None if name == "one" else many["one"])

        print(f"\nsampler, per batch of {BATCH} ({load()})")
        for k, mix in mixes.items():
            for world in (1, 8):
                cost = bench_sampler(mix, world, args.sampler_batches)
                print(f"  mixture of {k:2d}, world size {world}: {us(cost)} CPU per batch = "
                      f"{cost / best(times[f'mix{k}']):5.1%} of its get_batch (best), "
                      f"{cost / best(times['one']):5.1%} of one dataset's")

        print(f"\nload_state_dict at step 10^6 (rank 3 of 8, {args.repeats // 4} repeats, {load()})")
        for k, mix in mixes.items():
            alone, first = bench_restore(mix, max(5, args.repeats // 4))
            print(f"  mixture of {k:2d}: load_state_dict {us(median(alone))}; with the first batch: "
                  f"best {best(first) * 1e3:.2f} ms, median {median(first) * 1e3:.2f} ms")

        print(f"\nbatch_loader, {args.loader_batches} batches of {BATCH} after 5 of warm-up ({load()})")
        bench_torch(one, mixes, args.loader_batches)

        print(f"\nstreams ({load()})")
        bench_stream_resume(store)
        print(f"\nend: {load()}")
        for mix in mixes.values():
            mix.close()
        one.close()


if __name__ == "__main__":
    main()
