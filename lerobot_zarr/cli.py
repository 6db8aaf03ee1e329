"""Command line: ``lerobot-zarr demo | info SOURCE | convert SOURCE | view SOURCE --episode N | push STORE REPO_ID``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .api import inspect, open_dataset
from .dataset import DatasetMeta, LeRobotZarrDataset
from .errors import LeRobotZarrError
from .hub import REPO_ID
from .source import LeRobotSource, is_lerobot_folder

__all__ = ["main", "describe"]


def _size_on_disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def describe(meta: DatasetMeta) -> str:
    """A human-readable summary of a dataset: features, counts, episodes, tasks, stats, local size."""
    m = meta
    n_local = int(m.materialized_episodes.sum())
    lines = [
        f"location:     {m.root}" + ("" if n_local else " (a LeRobot folder, not transcoded)"),
        f"source:       {m.source.get('path') or m.source}",
        f"format:       LeRobot {m.info.get('codebase_version')}, robot_type={m.robot_type}, fps={m.fps:g}",
        f"episodes:     {m.total_episodes} ({n_local} in the local store)",
        f"frames:       {m.total_frames}",
        f"lengths:      min {int(m.episode_length.min())}, median {int(np.median(m.episode_length))}, "
        f"max {int(m.episode_length.max())}",
        f"tasks ({len(m.tasks)}):" + "".join(f"\n  [{i}] {t}" for i, t in enumerate(m.tasks[:10]))
        + ("\n  ..." if len(m.tasks) > 10 else ""),
        "features:",
    ]
    for name, ft in m.features.items():
        status = f"not materialized: {m.not_materialized[name]}" if name in m.not_materialized else "stored"
        names = ft.get("names")
        shown = f", names={str(names)[:60]}{'...' if len(str(names)) > 60 else ''}" if names else ""
        lines.append(f"  {name:<32} {ft['dtype']:<8} {str(tuple(ft.get('shape', ()))):<14} {status}{shown}")
    if m.stats:
        lines.append("stats (mean of each stored vector feature, first values):")
        for name, s in m.stats.items():
            if name in m.stored_features and "mean" in s:
                mean = np.asarray(s["mean"], dtype=float).reshape(-1)
                lines.append(f"  {name:<32} {np.array2string(mean[:4], precision=3)}{' ...' if mean.size > 4 else ''}")
    hub_bytes = m.source.get("hub_bytes")
    if hub_bytes:
        lines.append("on the Hub:   " + ", ".join(f"{k}/ {v / 1e6:.1f} MB" for k, v in hub_bytes.items()))
    if n_local:
        lines.append(f"local size:   {_size_on_disk(m.root) / 1e6:.1f} MB")
    else:
        frame_bytes = sum(int(np.prod(ft.get("shape") or [1])) * (1 if ft["dtype"] in ("image", "bool") else
                          np.dtype(ft["dtype"]).itemsize) for k, ft in m.features.items() if k in m.stored_features)
        lines.append(f"store size:   {m.total_frames * frame_bytes / 1e6:.1f} MB once transcoded (stored features)")
    return "\n".join(lines)


def _episode_list(text: str) -> list[int]:
    """``"0,3,5-9"`` -> ``[0, 3, 5, 6, 7, 8, 9]`` (an argparse type: bad input is a usage error)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            a, dash, b = part.strip().partition("-")
            if dash and not b:
                raise ValueError(part)
            out.extend(range(int(a), int(b) + 1) if dash else [int(a)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected episode indices like 0,3,5-9") from None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lerobot-zarr", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="generate a sample LeRobot dataset, transcode it, sample it, time it")
    demo.add_argument("--dir", type=Path, default=None, help="an empty or new work folder (default: a temporary one)")
    demo.add_argument("--episodes", type=int, default=300, help="episodes in the generated dataset")
    info = sub.add_parser("info", help="describe a LeRobot dataset folder, a store, or a Hub repo (metadata only)")
    info.add_argument("source", help="folder, store or Hub repo id org/name")
    info.add_argument("--revision", default=None, help="Hub branch, tag or commit")
    convert = sub.add_parser("convert", help="transcode a LeRobot dataset folder or Hub repo into a store")
    convert.add_argument("source", help="folder or Hub repo id org/name")
    convert.add_argument("--revision", default=None, help="Hub branch, tag or commit")
    convert.add_argument("--root", type=Path, default=None, help="store folder (default: the cache)")
    convert.add_argument("--episodes", type=_episode_list, default=None, help="e.g. 0,3,5-9 (default: all)")
    convert.add_argument("--compact", action="append", default=[], metavar="CAMERA",
                         help="keep this camera compressed (zstd per frame) instead of raw; repeatable")
    convert.add_argument("--scheduler", default=None, metavar="ADDRESS",
                         help="transcode on a dask.distributed cluster (e.g. tcp://host:8786; the workers must see "
                              "the store folder at the same path)")
    push = sub.add_parser("push", help="publish a store to a Hub dataset repo as LeRobot v3.0 (one commit)")
    push.add_argument("store", type=Path)
    push.add_argument("repo_id")
    push.add_argument("--revision", default=None, help="branch to commit to (default main)")
    push.add_argument("--private", action="store_true")
    push.add_argument("--message", default=None, help="commit message")
    view = sub.add_parser("view", help="plot one episode to a PNG (and log it to a rerun .rrd)")
    view.add_argument("source", help="store, LeRobot folder or Hub repo id org/name")
    view.add_argument("--episode", type=int, required=True)
    view.add_argument("--out", type=Path, default=None, help="PNG path (default episode_<n>.png)")
    view.add_argument("--rrd", type=Path, default=None, help="also save a rerun recording (needs rerun-sdk)")
    view.add_argument("--revision", default=None, help="Hub branch, tag or commit")
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run_demo

            run_demo(args.dir, n_episodes=args.episodes)
        elif args.command == "info":
            path = Path(args.source)
            if is_lerobot_folder(path):
                meta = DatasetMeta.from_source(LeRobotSource(path))
            elif path.exists() or not REPO_ID.match(args.source):
                meta = LeRobotZarrDataset(path).meta
            else:
                meta = inspect(args.source, revision=args.revision)
            print(describe(meta))
        elif args.command == "convert":
            storage = {camera: "compact" for camera in args.compact}
            if args.scheduler:
                from distributed import Client

                with Client(args.scheduler) as client:
                    ds = open_dataset(args.source, root=args.root, episodes=args.episodes, revision=args.revision,
                                      storage=storage, client=client)
            else:
                ds = open_dataset(args.source, root=args.root, episodes=args.episodes, revision=args.revision,
                                  storage=storage)
            print(describe(ds.meta))
        elif args.command == "view":
            from .view import view_episode

            png = view_episode(args.source, args.episode, out=args.out, rrd=args.rrd, revision=args.revision)
            print(f"wrote {png}" + (f" and {args.rrd}" if args.rrd else ""))
        elif args.command == "push":
            commit = LeRobotZarrDataset(args.store).push(args.repo_id, revision=args.revision, private=args.private,
                                                         commit_message=args.message)
            print(f"pushed {args.store} to {args.repo_id}: " + (f"commit {commit}" if commit else "no change"))
    except LeRobotZarrError as exc:
        print(f"lerobot-zarr: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lerobot-zarr: interrupted (committed episodes are kept; run again to resume)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
