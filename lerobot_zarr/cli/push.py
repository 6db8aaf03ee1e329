"""``lerobot-zarr push``: publish a store (or some of its episodes) to a Hub dataset repo as LeRobot v3.0; the
push options and report that ``edit --push`` shares."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..cloud.urls import is_bucket_url
from ..sampling.dataset import LeRobotZarrDataset
from .options import episode_list

__all__ = ["add_parser", "add_push_options", "push_and_report", "run"]


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``push`` command and its options."""
    push = subparsers.add_parser("push", parents=[common],
                                 help="publish a store to a Hub dataset repo as LeRobot v3.0 (one commit)")
    push.add_argument("store", help="the store folder (see `cache ls` for the cached ones)")
    push.add_argument("repo_id", help="Hub dataset repo id org/name (created if missing)")
    push.add_argument("--token", default=None, help="Hub token with write access (default: `hf auth login`'s)")
    push.add_argument("--episodes", type=episode_list, default=None, metavar="0,3,5-9",
                      help="publish only these episodes of the store, as a new dataset renumbered from 0 (default: "
                           "every episode; a store lacking some is refused)")
    add_push_options(push, "--revision", "--branch")
    return push


def add_push_options(parser: argparse.ArgumentParser, *branch_flags: str) -> None:
    """The options of a push (``push``, ``edit --push``): branch, privacy, commit message."""
    parser.add_argument(*branch_flags, dest="branch", default=None, help="branch to commit to (default main)")
    parser.add_argument("--private", action="store_true", help="create the repo private (an existing one is unchanged)")
    parser.add_argument("--message", default=None, help="commit message")


def push_and_report(ds: LeRobotZarrDataset, label: str, repo_id: str, args: argparse.Namespace) -> None:
    """Push ``ds`` with the push options in ``args`` and print the commit (or that nothing changed)."""
    commit = ds.push(repo_id, revision=args.branch, private=args.private, token=args.token,
                     commit_message=args.message, progress=True)
    print(f"pushed {label} to {repo_id}" + (f"@{args.branch}" if args.branch else "") + ": "
          + (f"commit {commit}" if commit else "no change (the Hub already holds these files)"))


def run(args: argparse.Namespace) -> int:
    from ..api import open_dataset

    ds = open_dataset(args.store) if is_bucket_url(args.store) else LeRobotZarrDataset(Path(args.store))
    if args.episodes is not None:
        ds = ds.select(args.episodes)  # the export warns which episodes it publishes, renumbered
    push_and_report(ds, str(args.store), args.repo_id, args)
    return 0
