"""Recording through LeRobot's API: the drop-in (lerobot_zarr.torch.LeRobotDataset) against LeRobot 0.6.1's own
recorder on the same frames, in one run. Needs torch and lerobot (``/path/to/lerobot-venv/bin/python``).

    python benchmarks/bench_record.py speed [--paced]     # 3 cameras 480x640, 3 episodes x 90 frames, 30 fps
    python benchmarks/bench_record.py kill --kills 20 [--paced]  # SIGKILL battery, 3 cameras 96x128

``speed``: each recorder takes the same frames, in each mode (``--modes``): ``plain`` (LeRobot's defaults as
``lerobot-record`` sets them: 4 image-writer threads per camera, videos encoded at each ``save_episode``),
``batch`` (``batch_encoding_size=--batch``), ``streaming`` (``streaming_encoding=True``, 2 encoder threads, as
LeRobot's docs recommend); ours and LeRobot's interleaved, ``--rounds`` times (alternating which goes first). Frames
come as fast as each recorder takes them, or with ``--paced`` at 30 fps, as a camera gives them, with a reset of
``--reset`` seconds before each ``save_episode`` but the last (``lerobot-record``'s order: record, reset, save).
Reported per step: frames/s over the recording (add_frame + save_episode + resets), ``add_frame`` p50/p99 (and its
p99 without the time the thread waited for a CPU: on a loaded machine the scheduler's share), ``save_episode``
p50/p99 (both return with the episode's videos made), ``finalize`` (ours: closes; the encoders' leftovers, if a
save could not wait for them, and LeRobot's files beside the store, which follow each ``save_episode``) with the
load average then, the total (recording + finalize: a LeRobot dataset at root), and for ours a push's export after
it (joins, encodes nothing).

``kill``: a recorder process (3 cameras 96x128, episodes of 50-200 frames) is SIGKILLed at random instants (after a
random number of the frames and saves it reports); after each kill, the episodes whose ``save_episode`` returned
are counted in what another process can read: for ours without ``finalize`` (and the recording goes on with
``resume``; LeRobot's files beside the store, written after each saved episode, checked too: those of one commit,
whole, or none), for LeRobot's what ``LeRobotDataset(root=...)`` loads (each run in a new folder: a LeRobot dataset
cannot be resumed after a crash). Each recorder and each reader is a fork of the benchmark's process, which
imports torch, LeRobot and lerobot_zarr once: a kill costs no interpreter start.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

FPS = 30


def features(height: int, width: int, cameras: int = 3) -> dict:
    out = {"observation.state": {"dtype": "float32", "shape": (6,), "names": None},
           "action": {"dtype": "float32", "shape": (6,), "names": None}}
    for c in range(cameras):
        out[f"observation.images.cam{c}"] = {"dtype": "video", "shape": (height, width, 3),
                                             "names": ["height", "width", "channels"]}
    return out


def frame(e: int, i: int, height: int, width: int, cameras: int = 3) -> dict:
    """A deterministic frame (episode ``e``, index ``i``): camera content that an encoder cannot skip."""
    ramp = (np.add.outer(np.arange(height), np.arange(width)) + 7 * i + 31 * e) % 256
    out = {"observation.state": np.array([e, i, 0, 0, 0, 0], np.float32),
           "action": np.full(6, i, np.float32), "task": f"task {e % 3}"}
    for c in range(cameras):
        out[f"observation.images.cam{c}"] = np.stack([ramp, (ramp + 60 * c) % 256, ramp // 2], -1).astype(np.uint8)
    return out


def classes() -> dict:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset as Theirs

    from lerobot_zarr.torch import LeRobotDataset as Ours

    return {"lerobot_zarr": Ours, "lerobot": Theirs}


# ----------------------------------------------------------------------------------------------------- speed


def _cpu_wait() -> float:
    """Seconds this thread has been runnable but waiting for a CPU (Linux schedstat; 0 elsewhere): on a loaded
    machine, what the scheduler adds to a call, whatever the call does."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except OSError:
        return 0.0


MODES = {  # as lerobot-record configures LeRobot's recorder: 4 image-writer threads per camera
    "plain": {"image_writer_threads": 12},
    # --batch (LeRobot 0.6.1's recorder fails at a new dataset's first batch: its episode table is not loaded,
    # `self._meta.episodes[start_episode]` on None; reported as such)
    "batch": {"image_writer_threads": 12, "batch_encoding_size": None},
    "streaming": {"image_writer_threads": 12, "streaming_encoding": True, "encoder_threads": 2},  # as LeRobot's docs
}


def _one(name: str, mode: str, kwargs: dict, frames: list, args: argparse.Namespace) -> dict[str, Any]:
    """One recording (``frames``: per episode) and its finalize; each step's times."""
    from lerobot_zarr.writing.export import to_lerobot

    cls = classes()[name]
    root = Path(tempfile.mkdtemp(prefix="bench_record-", dir=args.tmp)) / "ds"
    try:
        ds = cls.create("bench/record", FPS, features(args.height, args.width), root=root, **kwargs)
        adds, waits, saves = [], [], []
        start = time.perf_counter()
        for e, episode in enumerate(frames):
            clock = time.perf_counter()
            for i, f in enumerate(episode):
                if args.paced:  # a camera's rate: frame i of the episode is taken at i / FPS
                    time.sleep(max(0.0, clock + i / FPS - time.perf_counter()))
                f = dict(f)  # LeRobot's add_frame takes the task out of the dict it is given
                w = _cpu_wait()
                t = time.perf_counter()
                ds.add_frame(f)
                adds.append(time.perf_counter() - t)
                waits.append(_cpu_wait() - w)
            if args.paced and e < len(frames) - 1:  # lerobot-record: the reset, then save_episode (none after the last)
                time.sleep(args.reset)
            t = time.perf_counter()
            ds.save_episode()
            saves.append(time.perf_counter() - t)
        recording = time.perf_counter() - start
        t = time.perf_counter()
        ds.finalize()
        finalize = time.perf_counter() - t
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        export = None
        if name == "lerobot_zarr":  # a push after finalize: the export joins finalize's segments, encodes nothing
            t = time.perf_counter()
            to_lerobot(root, root.parent / "export", progress=False, encoder_threads=kwargs.get("encoder_threads"))
            export = time.perf_counter() - t
    finally:  # (LeRobot's batch mode fails: its folder too)
        shutil.rmtree(root.parent, ignore_errors=True)
    return {"fps": len(adds) / recording, "add_p50": np.percentile(adds, 50), "add_p99": np.percentile(adds, 99),
            "own_p99": np.percentile(np.subtract(adds, waits), 99), "save_p50": np.percentile(saves, 50),
            "save_p99": np.percentile(saves, 99), "finalize": finalize, "total": recording + finalize,
            "export": export, "load": load}


def speed(args: argparse.Namespace) -> None:
    if args.encoder_nice is not None:
        from lerobot_zarr.writing import segments

        segments.ENCODER_NICE = args.encoder_nice
    frames = [[frame(e, i, args.height, args.width) for i in range(args.frames)] for e in range(args.episodes)]
    print(f"{'paced at 30 fps, reset ' + str(args.reset) + ' s' if args.paced else 'as fast as each takes them'}; "
          f"{args.episodes} episodes x {args.frames} frames, 3 cameras {args.height}x{args.width}", flush=True)
    for r in range(args.rounds):
        for mode in args.modes.split(","):
            kwargs = {k: (args.batch if v is None else v) for k, v in MODES[mode].items()}
            order = ("lerobot_zarr", "lerobot") if r % 2 == 0 else ("lerobot", "lerobot_zarr")
            got = {}
            for name in order:
                try:
                    got[name] = _one(name, mode, kwargs, frames, args)
                except Exception as exc:  # noqa: BLE001  (LeRobot's batch mode: see MODES)
                    print(f"round {r + 1} {mode:9s} {name:12s} failed: {type(exc).__name__}: {exc}", flush=True)
            for name in [n for n in ("lerobot_zarr", "lerobot") if n in got]:
                g = got[name]
                print(f"round {r + 1} {mode:9s} {name:12s} {g['fps']:6.1f} frames/s  add_frame p50 "
                      f"{1e3 * g['add_p50']:5.2f} ms p99 {1e3 * g['add_p99']:6.2f} ms (own p99 {1e3 * g['own_p99']:5.2f}"
                      f" ms)  save_episode p50 {g['save_p50']:5.2f} s p99 {g['save_p99']:5.2f} s  finalize "
                      f"{g['finalize']:5.2f} s  total {g['total']:5.1f} s"
                      + (f"  push export {g['export']:4.1f} s" if g["export"] is not None else "")
                      + f"  (load {g['load']})", flush=True)
            if len(got) < 2:
                continue
            ours, theirs = got["lerobot_zarr"], got["lerobot"]
            print(f"round {r + 1} {mode:9s} LeRobot / lerobot_zarr: frames/s {ours['fps'] / theirs['fps']:.2f}x "
                  f"(ours faster above 1), save_episode p50 {theirs['save_p50'] / ours['save_p50']:.2f}x, "
                  f"total {theirs['total'] / ours['total']:.2f}x", flush=True)


# ----------------------------------------------------------------------------------------------------- kill

def _record(name: str, root: Path, first: int, seed: int, paced: bool, out: Any) -> None:
    """A recorder (create, or resume after ``first`` episodes) reporting each frame and each save to ``out``
    (``paced``: frames at 30 fps)."""
    cls = classes()[name]
    ds = cls.create("bench/kill", FPS, features(96, 128), root=root) if first == 0 else \
        cls.resume("bench/kill", root=root)
    rng = np.random.default_rng(seed)
    for e in range(first, first + 10_000):
        clock = time.perf_counter()
        for i in range(int(rng.integers(50, 201))):
            if paced:
                time.sleep(max(0.0, clock + i / FPS - time.perf_counter()))
            ds.add_frame(frame(e, i, 96, 128))
            out.write("f\n")
        ds.save_episode()
        out.write(f"saved {e}\n")


def _readable(name: str, root: Path, out: Any) -> None:
    """How many episodes another process reads from ``root`` (each episode's first and last frames checked against
    what was recorded), written to ``out``; 0 when the dataset does not load."""
    try:
        ds = classes()[name]("bench/kill", root=root)
        start = 0
        for e in range(ds.meta.total_episodes):
            n = int(ds.meta.episodes[e]["length"])
            for i in (0, n - 1):
                s = ds[start + i]["observation.state"]
                assert int(s[0]) == e and int(s[1]) == i, (e, i, s)
            start += n
        out.write(f"{ds.meta.total_episodes}\n")
    except Exception as exc:  # noqa: BLE001  (LeRobot's recorder killed before finalize: its files may not load)
        held = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "images" not in p.parts)
        out.write(f"0 {type(exc).__name__} ({str(exc).splitlines()[0][:80]}); the folder holds {held[:8]}\n")


def _beside(root: Path, out: Any) -> None:
    """LeRobot's files beside our store after a kill (written after each saved episode): ``whole N`` (those of a
    commit of N episodes, as written, LeRobot 0.6.1 reading them to their last frame), ``none`` (no episode table:
    no dataset LeRobot reads), or ``BROKEN`` with why."""
    from lerobot_zarr.writing.export import edited_beside, exported_state

    marker = exported_state(root)
    if marker is None:
        out.write("none\n" if not (root / "meta" / "episodes").exists() else "BROKEN episode table, no marker\n")
        return
    try:
        edited = edited_beside(root)
        theirs = classes()["lerobot"]("bench/kill", root=root)
        last = theirs[len(theirs) - 1]
        assert not edited and theirs.meta.total_episodes == marker["episodes"], edited
        assert int(last["episode_index"]) == marker["episodes"] - 1
        out.write(f"whole {marker['episodes']}\n")
    except Exception as exc:  # noqa: BLE001  (reported)
        out.write(f"BROKEN {type(exc).__name__}: {str(exc)[:120]}\n")


def _forked(target: Callable[..., None], *args: Any) -> tuple[int, Any]:
    """``target(*args, out)`` in a child forked from this process (its imports done once, here: a kill costs no
    interpreter start); returns the child's pid and the lines it writes to ``out``, line-buffered."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        code = 0
        try:
            os.close(read)
            with os.fdopen(write, "w", buffering=1) as out:
                target(*args, out)
        except BaseException:  # noqa: BLE001  (the exit code tells; the parent reads what the child wrote)
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    return pid, os.fdopen(read)


def _run_until_killed(name: str, root: Path, first: int, events: int, seed: int, paced: bool) -> list[int]:
    """The episodes whose save_episode returned before the recorder was SIGKILLed, ``events`` reports in."""
    pid, lines = _forked(_record, name, root, first, seed, paced)
    saved, seen = [], 0
    with lines:
        for line in lines:
            seen += 1
            if line.startswith("saved"):
                saved.append(int(line.split()[1]))
            if seen >= events:
                break
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return saved


def _count_readable(name: str, root: Path) -> tuple[int, str]:
    pid, lines = _forked(_readable, name, root)
    with lines:
        words = lines.read().split(maxsplit=1)
    os.waitpid(pid, 0)
    return (int(words[0]), words[1] if len(words) > 1 else "") if words else (0, "the reader died")


def kill(args: argparse.Namespace) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    classes()  # imported once, before any fork: each recorder and reader is a fork of this process
    # the imports leave idle threads of their own (jemalloc's); no lock of them is taken in the children
    warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
    rng = np.random.default_rng(args.seed)
    for name in ("lerobot_zarr", "lerobot"):
        parent = Path(tempfile.mkdtemp(prefix=f"bench_kill-{name}-", dir=args.tmp))
        kept_total = saved_total = 0
        first = 0
        start = time.perf_counter()
        for k in range(args.kills):
            root = parent / ("ds" if name == "lerobot_zarr" else f"ds{k}")
            begin = first if name == "lerobot_zarr" else 0
            events = int(rng.integers(60, 500))
            saved = _run_until_killed(name, root, begin, events, seed=k, paced=args.paced)
            readable, why = _count_readable(name, root)
            kept_now = readable - begin if name == "lerobot_zarr" else readable
            if name == "lerobot_zarr":
                assert readable >= begin + len(saved), (k, readable, begin, saved)  # never fewer than saved
                first = readable
            if name == "lerobot_zarr":  # LeRobot's files beside the store: of a commit, whole, or none
                pid, lines = _forked(_beside, root)
                with lines:
                    beside = lines.read().strip() or "the reader died"
                os.waitpid(pid, 0)
                why = (why + "; " if why else "") + f"files beside: {beside}"
            kept = max(0, min(kept_now, len(saved)))
            saved_total += len(saved)
            kept_total += kept
            print(f"{name:12s} kill {k + 1:2d} after {events:3d} reports: {len(saved)} episodes saved before the "
                  f"kill, {kept} readable afterwards" + (f" ({why})" if why else ""), flush=True)
            if name == "lerobot" and k >= 1:
                shutil.rmtree(parent / f"ds{k - 1}", ignore_errors=True)
        print(f"{name}: {kept_total} of {saved_total} saved episodes kept over {args.kills} kills "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        shutil.rmtree(parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("speed")
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--frames", type=int, default=90)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--modes", default="plain,batch,streaming", help="of: plain (LeRobot's defaults, as lerobot-record's),"
                   " batch (batch_encoding_size=--batch), streaming (streaming_encoding=True, encoder_threads=2)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2, help="each mode's pair this many times, alternating who goes first")
    p.add_argument("--paced", action="store_true", help="frames given at 30 fps (a camera's rate), with a reset of "
                   "--reset seconds before each save_episode but the last, as lerobot-record")
    p.add_argument("--reset", type=float, default=2.0)
    p.add_argument("--encoder-nice", type=int, default=None, help="our background encoders' nice value (default: "
                   "lerobot_zarr.writing.segments.ENCODER_NICE)")
    p.add_argument("--tmp", default=None)
    p.set_defaults(run=speed)
    p = sub.add_parser("kill")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--paced", action="store_true", help="frames at 30 fps (the encoders keep up: LeRobot's files "
                   "beside our store are written as it records)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tmp", default=None)
    p.set_defaults(run=kill)
    args = parser.parse_args()
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}", flush=True)
    args.run(args)
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}", flush=True)


if __name__ == "__main__":
    main()
