"""``lerobot-zarr view``: plot one episode to a PNG, optionally a rerun recording or a live rerun viewer."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``view`` command and its options."""
    view = subparsers.add_parser("view", parents=[common], help="plot one episode to a PNG (curves, camera frames); "
                                                                "rerun .rrd or viewer")
    view.add_argument("source", help="store, LeRobot folder or Hub repo id org/name (only that episode is fetched)")
    view.add_argument("--episode", type=int, required=True, help="episode index")
    view.add_argument("--out", type=Path, default=None, help="PNG path (default episode_<n>.png)")
    view.add_argument("--rrd", type=Path, default=None, help="also save a rerun recording (needs rerun-sdk)")
    live = view.add_mutually_exclusive_group()
    live.add_argument("--spawn", action="store_true", help="also open the episode in a rerun viewer (needs a display)")
    live.add_argument("--serve", action="store_true",
                      help="also serve the episode to rerun viewers over gRPC (connect with `rerun --connect URL`); "
                           "runs until Ctrl-C")
    view.add_argument("--revision", default=None, help="Hub branch, tag or commit")
    view.add_argument("--token", default=None, help="Hub token")
    return view


def run(args: argparse.Namespace) -> int:
    from ..integrations.view import view_episode

    png = view_episode(args.source, args.episode, out=args.out, rrd=args.rrd, revision=args.revision,
                       token=args.token, live="spawn" if args.spawn else "serve" if args.serve else None)
    print(f"wrote {png}" + (f" and {args.rrd}" if args.rrd else ""))
    return 0
