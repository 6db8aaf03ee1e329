"""``lerobot-zarr sync``: publish a store to a bucket folder, or copy a store from one (docs/object-storage.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..cloud.urls import is_bucket_url
from ..errors import ArgumentError
from .text import size_text

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``sync`` command and its options."""
    sync = subparsers.add_parser(
        "sync", parents=[common], help="publish a store to a bucket (s3://, gs://, az://, hf://buckets/), or copy one",
        description="STORE URL publishes the store's last commit to the bucket folder: the files the bucket lacks, "
                    "then the root with a conditional write (an interrupted sync leaves the bucket at its last "
                    "commit: run it again to complete it; a commit another writer published there is never replaced "
                    "unless --force). URL DIR copies the bucket's store to a new folder (the root last). "
                    "Credentials and endpoint: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, "
                    "AWS_REGION, AWS_PROFILE (docs/object-storage.md).")
    sync.add_argument("source", help="a store folder (to publish), or a bucket URL (to copy)")
    sync.add_argument("target", help="a bucket URL (to publish to), or a new folder (to copy into)")
    sync.add_argument("--force", action="store_true",
                      help="publish even over a commit this store did not publish (replacing it)")
    sync.add_argument("--no-progress", action="store_true", help="no progress bar")
    return sync


def run(args: argparse.Namespace) -> int:
    from ..writing.sync import pull_store, push_store

    if is_bucket_url(args.target) and not is_bucket_url(args.source):
        report = push_store(Path(args.source), args.target, force=args.force, progress=not args.no_progress)
        if report.committed:
            print(f"published {args.source} to {args.target}: {len(report.uploaded)} files "
                  f"({size_text(report.uploaded_bytes)}) uploaded, {len(report.skipped)} already there")
        else:
            print(f"{args.target} holds this commit already: nothing uploaded")
        return 0
    if is_bucket_url(args.source) and not is_bucket_url(args.target):
        if args.force:
            raise ArgumentError("sync URL DIR copies into a new folder: --force does not apply")
        root = pull_store(args.source, Path(args.target), progress=not args.no_progress)
        print(f"copied {args.source} to {root}")
        return 0
    raise ArgumentError(f"sync takes a store folder and a bucket URL (publish), or a bucket URL and a new folder "
                        f"(copy); got {args.source!r} and {args.target!r}")
