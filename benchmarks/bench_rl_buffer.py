"""lerobot_zarr.rl.ReplayBuffer against LeRobot's in-memory ReplayBuffer (issue 24), ratios measured in one run.

    PYTHONPATH=. python benchmarks/bench_rl_buffer.py [--quick]   # a Python with torch and lerobot

1. ``add`` per transition, amortized (ours commits every finished episode to the store), the same transitions
   into both buffers, alternating: state only, and with a camera stored as the drop-in stores it by default
   (float32, exact) and as uint8 (``image_storage="uint8"``); the ``sample`` section repeats the first two.
2. ``sample(256)``: state f32[14] only, and with a camera (LeRobot keeps it as float32 CHW in RAM, we as uint8 HWC
   in the store), fresh random indices every call, interleaved repeats; without DrQ (the storage path) and with
   DrQ (``random_shift`` eager, the same function object in both).
3. ``checkpoint()`` (commit the episode in progress) with the camera, at buffer sizes of 10^3 and 10^5 transitions
   (``--checkpoint-sizes``): 20 new transitions then one checkpoint, repeated; not durable (a killed process
   keeps it) and durable (flushed to disk). LeRobot's persistence, ``to_lerobot_dataset`` of its buffer, is timed
   at the smallest size for context.
4. An offline buffer from a dataset LeRobot wrote (``to_lerobot_dataset``): LeRobot's ``from_lerobot_dataset``
   (every item decoded into RAM) against ours reading it in place, and copied into a writable buffer; ``sample(256)``.
5. A learner process samples ``mode="r"`` while an actor process adds (``--actor-rates`` transitions/s, an episode
   commit every ``--episode`` transitions): samples/s with the actor adding vs paused, in alternating phases, and the
   learner's CPU per sample (what sharing the store costs it, apart from the CPU the actor takes on a small VM).

Timings are printed, never asserted; the load average is printed with each section (the VM is shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


class Transitions:
    """Random transitions drawn from a small pool of frames (the generator costs nothing next to the buffers)."""

    def __init__(self, torch, image: int | None, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.torch = torch
        self.states = torch.from_numpy(rng.standard_normal((512, 1, 14), dtype=np.float32))
        self.actions = torch.from_numpy(rng.standard_normal((512, 1, 6), dtype=np.float32))
        self.frames = None if image is None else torch.from_numpy(
            rng.integers(0, 256, (64, 1, 3, image, image), dtype=np.uint8)).float() / 255
        self.i = 0

    def state(self, i: int) -> dict:
        out = {"observation.state": self.states[i % 512]}
        if self.frames is not None:
            out["observation.images.front"] = self.frames[i % 64]
        return out

    def episode(self, length: int) -> list[tuple]:
        first = self.i
        self.i += length + 1
        return [(self.state(first + t), self.actions[(first + t) % 512], float(t), self.state(first + t + 1),
                 t == length - 1, False, {"penalty": 0.0}) for t in range(length)]


def timed_fill(buffers: dict, gen: Transitions, n: int, episode: int
               ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(us per transition, amortized; of which in the adds that end an episode, amortized; CPU us per transition,
    of every thread of the process while the add ran) for each buffer."""
    spent, ending, cpu, added = dict.fromkeys(buffers, 0.0), dict.fromkeys(buffers, 0.0), dict.fromkeys(buffers, 0.0), 0
    while added < n:
        for tr in gen.episode(episode):
            for name, b in buffers.items():
                c0, t0 = time.process_time(), time.perf_counter()
                b.add(*tr)
                t = time.perf_counter() - t0
                cpu[name] += time.process_time() - c0
                spent[name] += t
                if tr[4]:
                    ending[name] += t
            added += 1
    return ({name: spent[name] / added * 1e6 for name in buffers},
            {name: ending[name] / added * 1e6 for name in buffers},
            {name: cpu[name] / added * 1e6 for name in buffers})


def per_sample_ms(buffers: dict, batch: int, repeats: int, calls: int) -> dict[str, tuple[float, float]]:
    """(best, median) ms per ``sample(batch)`` of each buffer, repeats interleaved."""
    from _common import interleaved

    for b in buffers.values():
        b.sample(batch)
    times = interleaved({name: (lambda b=b: [b.sample(batch) for _ in range(calls)]) for name, b in buffers.items()},
                        repeats)
    return {name: (min(ts) / calls * 1e3, statistics.median(ts) / calls * 1e3) for name, ts in times.items()}


def add_line(add: dict[str, float], ending: dict[str, float], cpu: dict[str, float]) -> str:
    """``timed_fill``'s figures in words: per transition, amortized, and what ours spends committing episodes."""
    return (f"add per transition, amortized: ours {add['ours']:.0f} us, LeRobot {add['lerobot']:.0f} us "
            f"({add['ours'] / add['lerobot']:.2f}x, target <= 2x); CPU ours {cpu['ours']:.0f} us, LeRobot "
            f"{cpu['lerobot']:.0f} us ({cpu['ours'] / cpu['lerobot']:.2f}x); ours commits each episode to the store: "
            f"{ending['ours']:.0f} us of it, the other adds {add['ours'] - ending['ours']:.0f} us "
            f"({(add['ours'] - ending['ours']) / add['lerobot']:.2f}x LeRobot's)")


def section_add(args, torch, ReplayBuffer, LeRobotReplayBuffer, work: Path) -> None:
    """``add`` alone: state only, a camera as the drop-in stores it by default (float32, exact) and as uint8."""
    print(f"\n== add: {args.transitions} transitions, episodes of {args.episode}; {load()}")
    for label, image, storage in (("state f32[14]", None, None),
                                  (f"+ camera 3x{args.image}x{args.image}, default (float32)", args.image, None),
                                  (f"+ camera 3x{args.image}x{args.image}, image_storage='uint8'", args.image,
                                   "uint8")):
        gen = Transitions(torch, image)
        ours = ReplayBuffer(args.transitions, device="cpu", use_drq=False, root=work / f"add-{image}-{storage}",
                            **({"image_storage": storage} if storage else {}))
        theirs = LeRobotReplayBuffer(args.transitions, device="cpu", use_drq=False, optimize_memory=True)
        add, ending, cpu = timed_fill({"ours": ours, "lerobot": theirs}, gen, args.transitions, args.episode)
        print(f"  {label}: {add_line(add, ending, cpu)}; {load()}")
        ours.close()
        del theirs


def section_add_and_sample(args, torch, ReplayBuffer, LeRobotReplayBuffer, random_shift, work: Path) -> None:
    print(f"\n== add and sample(256): {args.transitions} transitions, episodes of {args.episode}; {load()}")
    rows = []
    for label, image in (("state f32[14]", None), (f"+ camera 3x{args.image}x{args.image}", args.image)):
        gen = Transitions(torch, image)
        ours = ReplayBuffer(args.transitions, device="cpu", use_drq=False, root=work / f"sample-{image}")
        theirs = LeRobotReplayBuffer(args.transitions, device="cpu", use_drq=False, optimize_memory=True)
        add, ending, cpu = timed_fill({"ours": ours, "lerobot": theirs}, gen, args.transitions, args.episode)
        print(f"  {label}: {add_line(add, ending, cpu)}")
        times = per_sample_ms({"ours": ours, "lerobot": theirs}, 256, args.repeats, args.calls)
        rows.append((label + ", no DrQ", times))
        if image is not None:
            shift = lambda x: random_shift(x, 4)  # noqa: E731
            ours.use_drq = theirs.use_drq = True
            ours.image_augmentation_function = theirs.image_augmentation_function = shift
            rows.append((label + ", DrQ (eager random_shift)", per_sample_ms({"ours": ours, "lerobot": theirs}, 256,
                                                                            args.repeats, args.calls)))
        ours.close()
        del theirs
    print(f"  sample(256), ms per call, best / median of {args.repeats} interleaved repeats of {args.calls} calls "
          f"(fresh random indices each call):")
    for label, t in rows:
        (ob, om), (lb, lm) = t["ours"], t["lerobot"]
        print(f"    {label:<45} ours {ob:8.3f} / {om:8.3f}  LeRobot {lb:8.3f} / {lm:8.3f}  ratio {ob / lb:.2f}x / "
              f"{om / lm:.2f}x (target <= 1.5x)")
    print(f"  {load()}")


def section_checkpoint(args, torch, ReplayBuffer, LeRobotReplayBuffer, work: Path) -> None:
    print(f"\n== checkpoint(): camera 3x{args.image}x{args.image}, 20 new transitions before each, the buffers in "
          f"turn; {load()}")
    buffers, extra = {}, {}
    for size in args.checkpoint_sizes:
        gen = Transitions(torch, args.image, seed=size)
        buf = ReplayBuffer(size + 10_000, device="cpu", root=work / f"checkpoint-{size}")
        t0 = time.perf_counter()
        while len(buf) < size:
            for tr in gen.episode(min(args.episode, size - len(buf))):
                buf.add(*tr)
        print(f"  {len(buf)} transitions filled in {time.perf_counter() - t0:.0f} s")
        buffers[size], extra[size] = buf, iter(gen.episode(10_000))
    times = {(size, durable): [] for size in buffers for durable in (False, True)}
    for _ in range(args.checkpoints):
        for durable in (False, True):
            for size, buf in buffers.items():
                for _ in range(20):
                    buf.add(*next(extra[size]))
                t0 = time.perf_counter()
                buf.checkpoint(durable=durable)
                times[size, durable].append(time.perf_counter() - t0)
    for size, buf in buffers.items():
        root = buf.root
        disk = sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())
        ms = {d: sorted(t * 1e3 for t in times[size, d]) for d in (False, True)}
        print(f"  {size:>7} transitions ({disk / 2**30:.2f} GiB on disk): checkpoint median "
              f"{statistics.median(ms[False]):.1f} ms, max {ms[False][-1]:.1f} ms; durable median "
              f"{statistics.median(ms[True]):.1f} ms, max {ms[True][-1]:.1f} ms (target <= 50 ms, flat)")
        buf.close()
        shutil.rmtree(root)
    size = min(args.checkpoint_sizes)
    gen = Transitions(torch, args.image, seed=1)
    theirs = LeRobotReplayBuffer(size, device="cpu", use_drq=False, optimize_memory=True)
    while len(theirs) < size:
        for tr in gen.episode(args.episode):
            theirs.add(*tr)
    t0 = time.perf_counter()
    shutil.rmtree(work / "lerobot-dataset", ignore_errors=True)
    theirs.to_lerobot_dataset("bench/rl", fps=10, root=work / "lerobot-dataset")
    print(f"  LeRobot's persistence of {size} transitions (to_lerobot_dataset): {time.perf_counter() - t0:.1f} s")
    print(f"  {load()}")


def section_offline(args, torch, ReplayBuffer, LeRobotReplayBuffer, work: Path) -> None:
    n = args.offline
    print(f"\n== offline buffer from a dataset LeRobot wrote ({n} transitions, camera 3x{args.image}x{args.image}); "
          f"{load()}")
    gen = Transitions(torch, args.image, seed=7)
    theirs = LeRobotReplayBuffer(n, device="cpu", use_drq=False)
    while len(theirs) < n:
        for tr in gen.episode(args.episode):
            theirs.add(*tr)
    shutil.rmtree(work / "offline-dataset", ignore_errors=True)
    ds = theirs.to_lerobot_dataset("bench/offline", fps=10, root=work / "offline-dataset")
    keys = ["observation.state", "observation.images.front"]
    opts = dict(device="cpu", state_keys=keys, use_drq=False)
    t0 = time.perf_counter()
    lerobot = LeRobotReplayBuffer.from_lerobot_dataset(ds, **opts)
    t1 = time.perf_counter()
    view = ReplayBuffer.from_lerobot_dataset(ds, **opts)  # transcodes the folder into the cache, reads it in place
    t2 = time.perf_counter()
    copy = ReplayBuffer.from_lerobot_dataset(ds, **opts, root=work / "offline-copy", progress=False)
    t3 = time.perf_counter()
    print(f"  from_lerobot_dataset: LeRobot {t1 - t0:.1f} s (per item into RAM), ours read in place {t2 - t1:.1f} s "
          f"(a transcode into a store), copied into a writable buffer {t3 - t2:.1f} s more")
    times = per_sample_ms({"lerobot": lerobot, "view": view, "copy": copy}, 256, args.repeats, args.calls)
    (lb, lm) = times["lerobot"]
    for name in ("view", "copy"):
        b, m = times[name]
        print(f"  sample(256) {name}: {b:.2f} / {m:.2f} ms vs LeRobot {lb:.2f} / {lm:.2f} ms (best / median): "
              f"{b / lb:.2f}x / {m / lm:.2f}x")
    copy.close()
    print(f"  {load()}")


_ACTOR = """
import os, sys, time
sys.path.insert(0, {bench!r})
import torch
from bench_rl_buffer import Transitions
from lerobot_zarr.rl import ReplayBuffer
buf = ReplayBuffer({capacity}, device="cpu", root={root!r})
gen = Transitions(torch, {image}, seed=5)
go = {go!r}
print("ready", flush=True)
added, next_t = 0, time.perf_counter()
while not os.path.exists({stop!r}):
    try:
        period = 1.0 / float(open(go).read())  # the learner writes the rate to run at
    except (FileNotFoundError, ValueError):
        time.sleep(0.01)
        next_t = time.perf_counter()
        continue
    for tr in gen.episode({episode}):
        buf.add(*tr)
        added += 1
        next_t += period
        time.sleep(max(0.0, next_t - time.perf_counter()))
buf.close()
print("added", added, time.process_time(), flush=True)
"""


def section_actor_learner(args, torch, ReplayBuffer, work: Path) -> None:
    print(f"\n== learner sampling while an actor process adds (camera 3x{args.image}x{args.image}, episodes of "
          f"{args.episode}, a commit per episode); {load()}")
    root = work / "shared"
    gen = Transitions(torch, args.image, seed=3)
    buf = ReplayBuffer(10**6, device="cpu", root=root, use_drq=False)
    while len(buf) < args.transitions:
        for tr in gen.episode(args.episode):
            buf.add(*tr)
    buf.close()
    go, stop = work / "actor.go", work / "actor.stop"
    code = _ACTOR.format(bench=str(Path(__file__).parent), capacity=10**6, root=str(root), image=args.image,
                         go=str(go), stop=str(stop), episode=args.episode)
    actor = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{Path(__file__).parent}"})
    assert actor.stdout.readline().strip() == "ready"
    learner = ReplayBuffer(10**6, device="cpu", root=root, mode="r", use_drq=False)
    learner.sample(256)
    start_len = len(learner)
    phases = [0.0, *[r for rate in args.actor_rates for r in (rate, 0.0)]] * args.phases
    rates: dict[float, list[float]] = {r: [] for r in phases}
    cpu: dict[float, list[float]] = {r: [] for r in phases}
    for rate in phases:
        if rate:
            go.write_text(str(rate))
        elif go.exists():
            go.unlink()
        time.sleep(0.6)  # let the actor start, or finish its episode and stop
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < args.phase_seconds:
            learner.sample(256)
            n += 1
        rates[rate].append(n / (time.perf_counter() - t0))
        cpu[rate].append((time.process_time() - c0) / n)
    if go.exists():
        go.unlink()
    stop.touch()
    _, added, actor_cpu = actor.communicate(timeout=120)[0].split()[-3:]
    learner.refresh()
    ro = statistics.median(rates[0.0])
    print(f"  read-only: {ro:.1f} samples/s (phases {[round(r, 1) for r in rates[0.0]]}), learner CPU "
          f"{statistics.median(cpu[0.0]) * 1e3:.1f} ms per sample")
    for rate in args.actor_rates:
        rw = statistics.median(rates[rate])
        print(f"  actor adding {rate:g}/s: {rw:.1f} samples/s (phases {[round(r, 1) for r in rates[rate]]}), "
              f"{rw / ro:.0%} of read-only (target >= 90 %); learner CPU {statistics.median(cpu[rate]) * 1e3:.1f} "
              f"ms per sample")
    print(f"  the actor added {added} transitions using {float(actor_cpu):.1f} s of CPU; the learner went from "
          f"{start_len} to {len(learner)} (a reader sees commits within refresh_interval = 1 s)")
    learner.close()
    print(f"  {load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transitions", type=int, default=10_000, help="buffer size for add/sample (default 10000)")
    parser.add_argument("--episode", type=int, default=100, help="transitions per episode (default 100)")
    parser.add_argument("--image", type=int, default=96, help="camera height and width (default 96)")
    parser.add_argument("--checkpoint-sizes", default="1000,100000",
                        help="buffer sizes for the checkpoint timing (default 1000,100000: ~2.8 GB of disk)")
    parser.add_argument("--checkpoints", type=int, default=15, help="checkpoints timed per size and mode")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20, help="sample() calls per timed repeat")
    parser.add_argument("--actor-rates", default="30,300",
                        help="actor transitions per second, one run each (default 30,300: a 30 fps robot, a sim)")
    parser.add_argument("--phases", type=int, default=2, help="rounds of read-only / actor phases")
    parser.add_argument("--phase-seconds", type=float, default=4.0)
    parser.add_argument("--sections", default="add,sample,checkpoint,offline,actor",
                        help="add (add alone: state, camera float32 and uint8), sample (add and sample), checkpoint, "
                             "offline, actor")
    parser.add_argument("--offline", type=int, default=2000, help="transitions of the offline dataset")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run in about a minute")
    parser.add_argument("--out-dir", type=Path, default=None, help="work folder (default: a temp dir, deleted)")
    args = parser.parse_args()
    if args.quick:
        args.transitions, args.checkpoint_sizes, args.repeats, args.phase_seconds = 2000, "500,5000", 3, 1.5
        args.checkpoints, args.phases, args.offline = 5, 1, 500
    args.checkpoint_sizes = [int(x) for x in args.checkpoint_sizes.split(",")]
    args.actor_rates = [float(x) for x in args.actor_rates.split(",")]
    try:
        import torch
        from lerobot.rl.buffer import ReplayBuffer as LeRobotReplayBuffer
    except ImportError as exc:
        print(f"bench_rl_buffer.py needs torch and lerobot ({exc}); nothing measured")
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from lerobot_zarr.rl import ReplayBuffer, random_shift

    torch.manual_seed(0)
    work = args.out_dir or Path(tempfile.mkdtemp(prefix="bench_rl_"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; work folder {work}")
    try:
        sections = args.sections.split(",")
        if "add" in sections:
            section_add(args, torch, ReplayBuffer, LeRobotReplayBuffer, work)
        if "sample" in sections:
            section_add_and_sample(args, torch, ReplayBuffer, LeRobotReplayBuffer, random_shift, work)
        if "checkpoint" in sections:
            section_checkpoint(args, torch, ReplayBuffer, LeRobotReplayBuffer, work)
        if "offline" in sections:
            section_offline(args, torch, ReplayBuffer, LeRobotReplayBuffer, work)
        if "actor" in sections:
            section_actor_learner(args, torch, ReplayBuffer, work)
    finally:
        if args.out_dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
