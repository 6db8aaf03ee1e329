"""``lerobot-zarr convert`` (alias ``download``): make a store of a LeRobot folder or Hub repo, or fetch more
episodes into a store, then print its summary as ``info`` does."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .info import print_summary
from .options import camera_option, camera_size, episode_list

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``convert`` command and its options."""
    convert = subparsers.add_parser("convert", aliases=["download"], parents=[common],
                                    help="make a store of a LeRobot folder or Hub repo (only the episodes asked for)")
    convert.add_argument("source", help="LeRobot folder, Hub repo id org/name or bucket URL (or a store, to fetch "
                                        "episodes; a store in a bucket with --root: copied there)")
    convert.add_argument("--revision", default=None, help="Hub branch, tag or commit (default: LeRobot's choice)")
    convert.add_argument("--token", default=None, help="Hub token (default: the one `hf auth login` saved)")
    convert.add_argument("--root", type=Path, default=None, help="store folder (default: in the cache, see `cache ls`)")
    convert.add_argument("--episodes", type=episode_list, default=None, help="e.g. 0,3,5-9 (default: all)")
    convert.add_argument("--storage", action="append", default=[], metavar="CAMERA=CHOICE", type=camera_option,
                         help="how the store keeps a camera: raw (default), lossless, compact, jpeg, jpeg:Q (quality "
                              "Q), mp4 (video cameras: the mp4 files kept, decoded on read); repeatable")
    convert.add_argument("--resize", action="append", default=[], metavar="CAMERA=HxW", type=camera_size,
                         help="store a camera resized to H x W pixels (antialiased bilinear); repeatable")
    convert.add_argument("--compact", action="append", default=[], metavar="CAMERA",
                         help="same as --storage CAMERA=compact (zstd per frame); repeatable")
    convert.add_argument("--scheduler", default=None, metavar="ADDRESS",
                         help="transcode on a dask.distributed cluster (e.g. tcp://host:8786; the workers must see "
                              "the store folder at the same path)")
    convert.add_argument("--json", action="store_true", help="print the summary as JSON")
    return convert


def run(args: argparse.Namespace) -> int:
    from ..api import open_dataset
    from ..cloud.urls import is_bucket_url

    if args.root is not None and is_bucket_url(args.source):
        from ..sources.resolve import resolve_source

        if resolve_source(args.source).what() == "store":  # a store in a bucket, wanted on this machine: a copy
            from ..writing.sync import pull_store

            pull_store(args.source, args.root)
            args.source, args.root = str(args.root), None

    storage = {**{camera: "compact" for camera in args.compact}, **dict(args.storage)}
    resize = dict(args.resize)
    kwargs = {"root": args.root, "episodes": args.episodes, "revision": args.revision, "token": args.token,
              "storage": storage or None, "resize": resize or None}
    if args.scheduler:
        from ..errors import import_optional

        distributed = import_optional("distributed", "convert --scheduler (a dask cluster)")
        with distributed.Client(args.scheduler) as client:
            ds = open_dataset(args.source, client=client, **kwargs)
    else:
        ds = open_dataset(args.source, **kwargs)
    print_summary(ds.meta, as_json=args.json)
    return 0
