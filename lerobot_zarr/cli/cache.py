"""``lerobot-zarr cache ls | rm | prune``: list the stores under the cache home, remove some, or remove those
nothing points to any more (like ``hf cache``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..errors import LeRobotZarrError
from .text import size_text

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``cache`` command and its actions, each with the common options."""
    cache = subparsers.add_parser("cache", parents=[common],
                                  help="list or remove the stores under the cache home (like `hf cache`)")
    actions = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    ls = actions.add_parser("ls", parents=[common], help="list stores: source, revision, size, episodes, last use")
    ls.add_argument("--json", action="store_true", help="print as JSON")
    rm = actions.add_parser("rm", parents=[common], help="remove stores: a store path, a repo id (all its commits), "
                                                         "repo@commit, or a LeRobot folder (its stores)")
    rm.add_argument("targets", nargs="+", metavar="TARGET", help="what to remove")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    rm.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    prune = actions.add_parser("prune", parents=[common],
                               help="remove stores nothing points to any more: old Hub commits, stores of folders "
                                    "that changed or are gone, never-committed transcodes")
    prune.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    prune.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    return cache


def run(args: argparse.Namespace) -> int:
    return _list(args) if args.cache_command == "ls" else _remove(args)


def _list(args: argparse.Namespace) -> int:
    from ..api import cache_home
    from ..sources.cache import cache_info

    stores = cache_info()
    if args.json:
        print(json.dumps([s.to_json() for s in stores], indent=2))
        return 0
    print(f"cache home: {cache_home()}")
    if not stores:
        print("(no stores)")
        return 0
    print(f"{'REVISION':<12} {'SIZE':>10} {'EPISODES':>11} {'LAST USE':>12}  SOURCE (REFS) [CAMERAS, STATUS]")
    for s in stores:  # the source last and whole: paths and repo ids are never cut
        rev = (s.revision or "")[:12] or "-"
        extra = (f" ({', '.join(s.refs)})" if s.refs else "") + "".join(
            f" [{x}]" for x in (s.variant, "" if s.status == "ok" else s.status) if x)
        print(f"{rev:<12} {size_text(s.size_bytes):>10} {f'{s.episodes}/{s.total_episodes}':>11} "
              f"{_age(s.last_used):>12}  {s.source}{extra}")
        print(f"  {s.path}")
    print(f"{len(stores)} stores, {size_text(sum(s.size_bytes for s in stores))}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    """``rm`` (the stores asked for) or ``prune`` (those nothing points to): listed, confirmed, removed."""
    from ..sources.cache import find_stores, prune_candidates, remove_store

    if args.cache_command == "rm":
        chosen, missing = [], []
        for target in args.targets:
            hits = find_stores(target)
            (chosen.extend(hits) if hits else missing.append(target))
        for target in missing:
            print(f"lerobot-zarr: no store in the cache matches {target!r}", file=sys.stderr)
        plan = [(s, "asked for") for s in {s.path: s for s in chosen}.values()]
    else:
        plan = prune_candidates()
    if not plan:
        print("nothing to remove")
        return 1 if args.cache_command == "rm" else 0
    for s, why in plan:
        print(f"  {s.source} {(s.revision or '')[:12]}  {size_text(s.size_bytes)}  ({why})\n    {s.path}")
    total = sum(s.size_bytes for s, _ in plan)
    if args.dry_run:
        print(f"would remove {len(plan)} stores, {size_text(total)}")
        return 0
    if not _confirm(f"remove {len(plan)} stores ({size_text(total)})?", args.yes):
        return 1
    freed, failed = 0, 0
    for s, _ in plan:
        try:
            freed += remove_store(s.path)
        except (LeRobotZarrError, ValueError, OSError) as exc:
            print(f"lerobot-zarr: not removed: {exc}", file=sys.stderr)
            failed += 1
    print(f"removed {len(plan) - failed} stores, {size_text(freed)} freed")
    return 1 if failed else 0


def _age(seconds: float) -> str:
    """How long ago a time stamp was, roughly."""
    seconds = max(0.0, time.time() - seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"


def _confirm(question: str, yes: bool) -> bool:
    """``--yes``, or the user's answer; without a terminal to ask on, no."""
    if yes:
        return True
    if not sys.stdin.isatty():
        print(f"{question} -- not confirmed (no terminal): pass --yes", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
