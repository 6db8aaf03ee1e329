"""``lerobot-zarr verify``: re-read a store and check its committed episodes against their recorded hashes.
Exit status 0 intact, 1 damage found, 3 nothing damaged but some episodes cannot be checked."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, SourceNotFoundError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``verify`` command and its options."""
    check = subparsers.add_parser(
        "verify", parents=[common],
        help="re-read a store and check every committed episode against its recorded content hashes",
        description="Re-read every committed episode of a store (every feature's rows, compact cameras' encoded "
                    "frames, mp4 files) and compare each with the content hash (crc32c) recorded when it was "
                    "committed; also check pack files, shard indexes and zarr's copies of the commit. Exit status: "
                    "0 intact, 1 damage found, 3 nothing damaged but some episodes cannot be checked (no hash "
                    "recorded). Sampling never checks; run this after copying a store or when in doubt.")
    check.add_argument("store", help="the store folder (see `cache ls` for the cached ones)")
    check.add_argument("--repair", action="store_true",
                       help="fix what can be: zarr's copies, interrupted edits, planted links, and damaged episodes "
                            "fetched again from the Hub repo or folder the store was made from")
    check.add_argument("--record", action="store_true",
                       help="record hashes for committed episodes that have none (stores made before hashes "
                            "existed), trusting their bytes as they are now")
    check.add_argument("--token", default=None, help="Hub token, to fetch damaged episodes again (--repair)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    return check


def run(args: argparse.Namespace) -> int:
    from ..cloud.urls import is_bucket_url
    from ..writing.integrity import verify

    if is_bucket_url(args.store):
        raise ArgumentError(f"{args.store}: verify re-reads a store on this machine; copy it first (`lerobot-zarr "
                            f"sync {args.store} DIR`), then verify the copy")
    args.store = Path(args.store)
    if not (args.store / "zarr.json").is_file():
        raise SourceNotFoundError(f"{args.store}: not a lerobot_zarr store (no zarr.json); verify checks a store "
                                  f"(see `lerobot-zarr cache ls`)", path=args.store)
    report = verify(args.store, repair=args.repair, record=args.record, token=args.token)
    print(json.dumps(report.to_json(), indent=2) if args.json else report.summary())
    if report.damaged or report.store_problems or report.not_repaired:
        return 1
    return 0 if report.ok else 3
