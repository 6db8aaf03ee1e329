"""Recording through LeRobot's API: the drop-in (lerobot_zarr.torch.LeRobotDataset) against LeRobot 0.6.1's own
recorder on the same frames, in one run. Needs torch and lerobot (``/path/to/lerobot-venv/bin/python``).

    python benchmarks/bench_record.py speed --episodes 3 --frames 90     # 3 cameras 480x640, 30 fps
    python benchmarks/bench_record.py kill --kills 20                      # SIGKILL battery, 3 cameras 96x128

``speed``: each recorder takes the same frames as fast as it can (``add_frame`` then ``save_episode``); reported:
frames/s over the whole recording (add_frame + save_episode), ``add_frame`` p50/p99, ``save_episode`` p50/p99, then
what finishing costs (LeRobot's ``finalize``; ours: ``finalize`` and the export a push makes, with its encode time).
LeRobot runs as ``lerobot-record`` configures it by default (4 image-writer threads per camera, videos encoded at
``save_episode``), and with ``--streaming`` as its docs recommend (``streaming_encoding=True``, 2 encoder threads).

``kill``: a recorder process (3 cameras 96x128, episodes of 50-200 frames) is SIGKILLed at random instants (after a
random number of the frames and saves it reports); after each kill, the episodes whose ``save_episode`` returned
are counted in what another process can read: for ours without ``finalize`` (and the recording goes on with
``resume``), for LeRobot's what ``LeRobotDataset(root=...)`` loads (each run in a new folder: a LeRobot dataset
cannot be resumed after a crash).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
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


def speed(args: argparse.Namespace) -> None:
    from lerobot_zarr.writing.export import to_lerobot

    frames = [[frame(e, i, args.height, args.width) for i in range(args.frames)] for e in range(args.episodes)]
    runs = [("lerobot_zarr", {}), ("lerobot", {"image_writer_threads": 12})]
    if args.streaming:
        runs.append(("lerobot", {"image_writer_threads": 12, "streaming_encoding": True, "encoder_threads": 2}))
    results = {}
    for name, kwargs in runs:
        cls = classes()[name]
        root = Path(tempfile.mkdtemp(prefix="bench_record-", dir=args.tmp)) / "ds"
        ds = cls.create("bench/record", FPS, features(args.height, args.width), root=root, **kwargs)
        adds, saves = [], []
        start = time.perf_counter()
        for episode in frames:
            for f in episode:
                f = dict(f)  # LeRobot's add_frame takes the task out of the dict it is given
                t = time.perf_counter()
                ds.add_frame(f)
                adds.append(time.perf_counter() - t)
            t = time.perf_counter()
            ds.save_episode()
            saves.append(time.perf_counter() - t)
        recording = time.perf_counter() - start
        t = time.perf_counter()
        ds.finalize()
        finalize = time.perf_counter() - t
        export = None
        if name == "lerobot_zarr":
            t = time.perf_counter()
            to_lerobot(root, root.parent / "export", progress=False)
            export = time.perf_counter() - t
        label = name + (" streaming" if kwargs.get("streaming_encoding") else "")
        results[label] = recording
        n = len(adds)
        print(f"{label:24s} {n / recording:7.1f} frames/s  add_frame p50 {1e3 * np.percentile(adds, 50):6.2f} ms "
              f"p99 {1e3 * np.percentile(adds, 99):6.2f} ms  save_episode p50 {np.percentile(saves, 50):5.2f} s "
              f"p99 {np.percentile(saves, 99):5.2f} s  finalize {finalize:5.2f} s"
              + (f"  push export (encode) {export:5.1f} s" if export is not None else ""), flush=True)
        shutil.rmtree(root.parent, ignore_errors=True)
    base = results["lerobot_zarr"]
    print("recording time ratio (LeRobot / lerobot_zarr): " +
          ", ".join(f"{k}: {v / base:.2f}x" for k, v in results.items() if k != "lerobot_zarr"))


# ----------------------------------------------------------------------------------------------------- kill

_CHILD = """
import os, sys
sys.path.insert(0, {here!r})
from bench_record import classes, features, frame
name, root, first, fd, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
import numpy as np
cls = classes()[name]
ds = (cls.create("bench/kill", 30, features(96, 128), root=root) if first == 0 else cls.resume("bench/kill", root=root))
out = os.fdopen(fd, "w", buffering=1)
rng = np.random.default_rng(seed)
for e in range(first, first + 10_000):
    for i in range(int(rng.integers(50, 201))):
        ds.add_frame(frame(e, i, 96, 128))
        out.write("f\\n")
    ds.save_episode()
    out.write(f"saved {{e}}\\n")
"""


def _run_until_killed(name: str, root: Path, first: int, events: int, seed: int) -> list[int]:
    read, write = os.pipe()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
               SVT_LOG="1")
    proc = subprocess.Popen([sys.executable, "-c", _CHILD.format(here=str(HERE)), name, str(root), str(first),
                             str(write), str(seed)], pass_fds=(write,), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    os.close(write)
    saved, seen = [], 0
    with os.fdopen(read) as lines:
        for line in lines:
            seen += 1
            if line.startswith("saved"):
                saved.append(int(line.split()[1]))
            if seen >= events:
                proc.send_signal(signal.SIGKILL)
                break
    proc.wait()
    return saved


def _readable(name: str, root: Path) -> int:
    """How many episodes another process reads from ``root`` (each episode's first and last frames checked
    against what was recorded); 0 when the dataset does not load."""
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); from bench_record import classes\n"
            f"ds = classes()[{name!r}]('bench/kill', root={str(root)!r})\n"
            "start = 0\n"
            "for e in range(ds.meta.total_episodes):\n"
            "    n = int(ds.meta.episodes[e]['length'])\n"
            "    for i in (0, n - 1):\n"
            "        s = ds[start + i]['observation.state']\n"
            "        assert int(s[0]) == e and int(s[1]) == i, (e, i, s)\n"
            "    start += n\n"
            "print(ds.meta.total_episodes)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
               HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    return int(proc.stdout.split()[-1]) if proc.returncode == 0 and proc.stdout.split() else 0


def kill(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    for name in ("lerobot_zarr", "lerobot"):
        parent = Path(tempfile.mkdtemp(prefix=f"bench_kill-{name}-", dir=args.tmp))
        kept_total = saved_total = 0
        first = 0
        for k in range(args.kills):
            root = parent / ("ds" if name == "lerobot_zarr" else f"ds{k}")
            start = first if name == "lerobot_zarr" else 0
            events = int(rng.integers(60, 500))
            saved = _run_until_killed(name, root, start, events, seed=k)
            kept = _readable(name, root)
            if name == "lerobot_zarr":
                kept_now = kept - start
                first = kept
            else:
                kept_now = kept
            saved_total += len(saved)
            kept_total += max(0, min(kept_now, len(saved)))
            print(f"{name:12s} kill {k + 1:2d}: {len(saved)} episodes saved before the kill, "
                  f"{max(0, min(kept_now, len(saved)))} readable afterwards", flush=True)
        print(f"{name}: {kept_total} of {saved_total} saved episodes kept over {args.kills} kills", flush=True)
        shutil.rmtree(parent, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("speed")
    p.add_argument("--episodes", type=int, default=3)
    p.add_argument("--frames", type=int, default=90)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--streaming", action="store_true", help="also LeRobot with streaming_encoding=True")
    p.add_argument("--tmp", default=None)
    p.set_defaults(run=speed)
    p = sub.add_parser("kill")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tmp", default=None)
    p.set_defaults(run=kill)
    args = parser.parse_args()
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}", flush=True)
    args.run(args)
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}", flush=True)


if __name__ == "__main__":
    main()
