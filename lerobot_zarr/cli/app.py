"""Command line: ``lerobot-zarr demo | info | convert (download) | view | edit | push | verify | cache ls|rm|prune``.

SOURCE is a LeRobot dataset folder (v3.x or v2.x), a store made by lerobot_zarr, or a Hub dataset repo id
``org/name``. Run ``lerobot-zarr COMMAND --help`` for each command's options.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LeRobotZarrError, LeRobotZarrWarning, SourceNotFoundError
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES
from ..store.tables import MAX_EPISODES

__all__ = ["describe", "describe_json", "main"]

log = logging.getLogger("lerobot_zarr")


def _is_store(meta: Any) -> bool:
    """Whether ``meta`` describes a store (else a source's metadata: ``inspect``)."""
    from ..store.state import has_commit_point

    return isinstance(meta.root, Path) and has_commit_point(meta.root)


def _mb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def source_line(source: dict) -> str:
    """A store's or source's origin on one line."""
    kind = source.get("kind")
    if kind == "local":
        return f"LeRobot folder {source.get('path')}"
    if kind == "hub":
        commit = str(source.get("commit", ""))
        endpoint = source.get("endpoint")
        where = "" if not endpoint or "huggingface.co" in str(endpoint) else f" on {endpoint}"
        return f"Hub {source.get('repo_id')} @ {commit[:12]}{where}"
    if kind == "recorded":
        return "recorded with lerobot_zarr.create"
    if kind == "edited":
        return f"edited in place, from {source_line(source.get('from', {}))}"
    return json.dumps(source, sort_keys=True)


def _frame_bytes(ft: dict) -> int:
    dtype = ft["dtype"]
    itemsize = 1 if dtype in CAMERA_DTYPES or dtype == "bool" else np.dtype(dtype).itemsize
    return int(np.prod(ft.get("shape") or [1])) * itemsize


def _episode_list_text(episodes: list[int]) -> str:
    return f"{episodes[:8]}{'...' if len(episodes) > 8 else ''}"


def feature_status(meta: Any, name: str) -> tuple[str, str]:
    """``(status, why)`` of a feature: ``stored`` (in the store, or to be stored by a transcode), ``not stored``
    (never, e.g. strings), ``unavailable`` (the source cannot give it for the episodes concerned: samples leave it
    out), ``partly unavailable`` (some episodes lack it: samples of a selection of the others have it), or
    ``needs PyAV`` (a video camera this Python cannot decode: samples leave it out until PyAV is installed)."""
    if name in meta.not_materialized:
        return "not stored", meta.not_materialized[name]
    status, why = _availability(meta, name)
    if name in meta.needs_pyav and status != "unavailable":
        return "needs PyAV", meta.needs_pyav[name] + (f"; besides, {status}: {why}" if why else "")
    return status, why


def _availability(meta: Any, name: str) -> tuple[str, str]:
    reasons = meta.unavailable.get(name, {})
    held = np.flatnonzero(meta.materialized_episodes) if meta.materialized_episodes.any() \
        else np.arange(meta.total_episodes)
    lacking = [int(e) for e in held if int(e) in reasons]
    if not lacking:
        return "stored", ""
    first = reasons[lacking[0]]
    where = "held" if meta.materialized_episodes.any() else "of the dataset"
    if len(lacking) == len(held):
        return "unavailable", f"in all {len(held)} episodes {where}; e.g. {first}"
    have = [int(e) for e in held if int(e) not in reasons]
    return "partly unavailable", (f"missing in {len(lacking)} of {len(held)} episodes {where} "
                                  f"{_episode_list_text(lacking)}: samples leave it out unless you select "
                                  f"episodes that have it, e.g. {_episode_list_text(have)}; e.g. {first}")


def _stats_means(meta: Any) -> dict[str, list[float]]:
    out = {}
    for name in meta.features:
        s = meta.stats.get(name, {})
        if name in DEFAULT_FEATURES or name not in meta.stored_features or "mean" not in s:
            continue
        out[name] = np.asarray(s["mean"], dtype=float).reshape(-1).tolist()
    return out


def describe_json(meta: Any) -> dict:
    """The summary of :func:`describe` as plain JSON-able data."""
    m = meta
    held = int(m.materialized_episodes.sum())
    features = {}
    held_or_all = np.flatnonzero(m.materialized_episodes) if m.materialized_episodes.any() \
        else np.arange(m.total_episodes)
    for name, ft in m.features.items():
        status, why = feature_status(m, name)
        features[name] = {"dtype": ft["dtype"], "shape": list(ft.get("shape") or []), "names": ft.get("names"),
                          "status": status, "why": why}
        if ft["dtype"] in CAMERA_DTYPES and name in m.stored_features:
            # which episodes have the camera (of those held, or of the dataset): what to select for complete samples
            lacking = m.unavailable.get(name, {})
            features[name]["episodes_with"] = [int(e) for e in held_or_all if int(e) not in lacking]
            features[name]["episodes_without"] = [int(e) for e in held_or_all if int(e) in lacking]
    is_store = _is_store(m)
    if not is_store:  # metadata only: what a transcode would store
        for ft in features.values():
            if ft["status"] == "stored":
                ft["status"] = "to store"
    out = {
        "location": str(m.root),
        "is_store": is_store,
        "source": m.source,
        "source_line": source_line(m.source),
        "codebase_version": m.info.get("codebase_version"),
        "robot_type": m.robot_type,
        "fps": m.fps,
        "total_episodes": m.total_episodes,
        "episodes_in_store": held,
        "total_frames": m.total_frames,
        "episode_length": {"min": int(m.episode_length.min()), "median": float(np.median(m.episode_length)),
                           "max": int(m.episode_length.max())} if m.total_episodes else None,
        "tasks": list(m.tasks),
        "features": features,
        "stats_mean": _stats_means(m),
    }
    if m.source.get("hub_bytes"):
        out["hub_bytes"] = m.source["hub_bytes"]
    if out["is_store"]:
        from ..store.cache import disk_usage

        out["local_bytes"] = disk_usage(Path(m.root))[0]  # allocated: packs are sparse until their episodes come
    else:
        out["estimated_store_bytes"] = sum(
            _frame_bytes(ft) * int(m.episode_length[[e for e in range(m.total_episodes)
                                                     if e not in m.unavailable.get(k, {})]].sum())
            for k, ft in m.features.items() if features[k]["status"] in ("to store", "partly unavailable",
                                                                         "needs PyAV"))
    return out


def describe(meta: Any) -> str:
    """A human-readable summary of a dataset: origin, counts, episodes, tasks, features (stored, not stored,
    unavailable, with why), stats of the data features, size."""
    d = describe_json(meta)
    lengths = d["episode_length"]
    held = d["episodes_in_store"]
    lines = [
        f"location:     {d['location']}" + ("" if d["is_store"] else " (metadata only: not transcoded)"),
        f"source:       {d['source_line']}",
        f"format:       LeRobot {d['codebase_version']}, robot_type={d['robot_type']}, fps={d['fps']:g}",
        f"episodes:     {d['total_episodes']}" + (f" ({held} in the store)" if d["is_store"] else ""),
        f"frames:       {d['total_frames']}",
    ]
    if lengths:
        lines.append(f"lengths:      min {lengths['min']}, median {lengths['median']:g}, max {lengths['max']}")
    tasks = d["tasks"]
    lines.append(f"tasks ({len(tasks)}):" + "".join(f"\n  [{i}] {t}" for i, t in enumerate(tasks[:10]))
                 + ("\n  ..." if len(tasks) > 10 else ""))
    lines.append("features:")
    for name, ft in d["features"].items():
        names = ft["names"]
        shown = f"  names={str(names)[:50]}{'...' if len(str(names)) > 50 else ''}" if names else ""
        status = ft["status"] if ft["status"] in ("stored", "to store") or name in DEFAULT_FEATURES else ft["status"].upper()
        lines.append(f"  {name:<32} {ft['dtype']:<8} {tuple(ft['shape'])!s:<14} {status}{shown}")
        if ft["why"]:
            lines.append(f"      why: {ft['why']}")
    if d["stats_mean"]:
        lines.append("stats (mean, first values):")
        for name, mean in d["stats_mean"].items():
            lines.append(f"  {name:<32} {np.array2string(np.asarray(mean[:4]), precision=3)}"
                         f"{' ...' if len(mean) > 4 else ''}")
    if "hub_bytes" in d:
        lines.append("on the Hub:   " + ", ".join(f"{k}/ {_mb(v)}" for k, v in d["hub_bytes"].items()))
    if "local_bytes" in d:
        lines.append(f"store size:   {_mb(d['local_bytes'])} on disk")
    else:
        lines.append(f"store size:   {_mb(d['estimated_store_bytes'])} once transcoded (cameras decoded raw)")
    return "\n".join(lines)


def _episode_list(text: str) -> list[int]:
    """``"0,3,5-9"`` -> ``[0, 3, 5, 6, 7, 8, 9]`` (an argparse type: bad input is a usage error)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            a, dash, b = part.strip().partition("-")
            if dash and not b:
                raise ValueError(part)
            if dash and int(b) < int(a):
                raise ValueError(part)
            if (int(b) + 1 - int(a) if dash else 1) + len(out) > MAX_EPISODES:  # before making the list
                raise argparse.ArgumentTypeError(f"{text!r:.80}: more than {MAX_EPISODES} episodes (a store holds "
                                                 f"at most that many)")
            out.extend(range(int(a), int(b) + 1) if dash else [int(a)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r:.80}: expected episode indices like 0,3,5-9") from None
    return out


def _push_options(parser: argparse.ArgumentParser, *branch_flags: str) -> None:
    """The options of a push (``push``, ``edit --push``): branch, privacy, commit message."""
    parser.add_argument(*branch_flags, dest="branch", default=None, help="branch to commit to (default main)")
    parser.add_argument("--private", action="store_true", help="create the repo private (an existing one is unchanged)")
    parser.add_argument("--message", default=None, help="commit message")


def _push(ds: Any, label: str, repo_id: str, args: argparse.Namespace) -> None:
    commit = ds.push(repo_id, revision=args.branch, private=args.private, token=args.token,
                     commit_message=args.message, progress=True)
    print(f"pushed {label} to {repo_id}" + (f"@{args.branch}" if args.branch else "") + ": "
          + (f"commit {commit}" if commit else "no change (the Hub already holds these files)"))


def _parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="lerobot-zarr", description=__doc__.replace("``", "'"),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"lerobot_zarr {__version__}")
    verbose = {"action": "store_true", "help": "log what is done; full tracebacks on errors"}
    parser.add_argument("-v", "--verbose", **verbose)
    # -v also after the command (`lerobot-zarr info X -v`); SUPPRESS keeps the one given before it
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", default=argparse.SUPPRESS, **verbose)
    sub = _Subcommands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"), common)

    demo = sub.add_parser("demo", help="the whole job offline: a test Hub on 127.0.0.1, inspect, partial download, "
                                       "sampling speed, edits, push and reopen")
    demo.add_argument("--dir", type=Path, default=None, help="an empty or new work folder (default: a temporary one)")
    demo.add_argument("--episodes", type=int, default=100, help="episodes in the generated dataset (default 100)")

    info = sub.add_parser("info", help="describe a dataset from its metadata (no data read): Hub repo, folder, store")
    info.add_argument("source", help="LeRobot folder, store, or Hub repo id org/name")
    info.add_argument("--revision", default=None, help="Hub branch, tag or commit (default: LeRobot's choice)")
    info.add_argument("--token", default=None, help="Hub token (default: the one `hf auth login` saved)")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")

    convert = sub.add_parser("convert", aliases=["download"],
                             help="make a store of a LeRobot folder or Hub repo (only the episodes asked for)")
    convert.add_argument("source", help="LeRobot folder or Hub repo id org/name (or a store, to fetch episodes)")
    convert.add_argument("--revision", default=None, help="Hub branch, tag or commit (default: LeRobot's choice)")
    convert.add_argument("--token", default=None, help="Hub token (default: the one `hf auth login` saved)")
    convert.add_argument("--root", type=Path, default=None, help="store folder (default: in the cache, see `cache ls`)")
    convert.add_argument("--episodes", type=_episode_list, default=None, help="e.g. 0,3,5-9 (default: all)")
    convert.add_argument("--storage", action="append", default=[], metavar="CAMERA=CHOICE", type=_camera_option,
                         help="how the store keeps a camera: raw (default), lossless, compact, jpeg, jpeg:Q (quality "
                              "Q), mp4 (video cameras: the mp4 files kept, decoded on read); repeatable")
    convert.add_argument("--resize", action="append", default=[], metavar="CAMERA=HxW", type=_camera_size,
                         help="store a camera resized to H x W pixels (antialiased bilinear); repeatable")
    convert.add_argument("--compact", action="append", default=[], metavar="CAMERA",
                         help="same as --storage CAMERA=compact (zstd per frame); repeatable")
    convert.add_argument("--scheduler", default=None, metavar="ADDRESS",
                         help="transcode on a dask.distributed cluster (e.g. tcp://host:8786; the workers must see "
                              "the store folder at the same path)")
    convert.add_argument("--json", action="store_true", help="print the summary as JSON")

    view = sub.add_parser("view", help="plot one episode to a PNG (curves, camera frames); rerun .rrd or viewer")
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

    edit = sub.add_parser(
        "edit", help="clean a dataset in place (delete or keep episodes, drop features), then optionally push it",
        description="Edit a store in place, as LeRobot's lerobot-edit-dataset does for its folders: features are "
                    "dropped, then episodes deleted (the others renumbered from 0), each in one atomic commit. A "
                    "LeRobot folder or Hub repo is edited in a store of its own (--root), never in the cached copy "
                    "that other opens read. Episode indices are those of the dataset as it is now.")
    edit.add_argument("source", help="the store to edit in place, or a LeRobot folder or Hub repo id org/name "
                                     "(copied into --root first)")
    edit.add_argument("--root", type=Path, default=None,
                      help="for a folder or Hub repo: the store folder to write (a new folder is made a copy of "
                           "the source with every episode; an existing one is edited further)")
    which = edit.add_mutually_exclusive_group()
    which.add_argument("--delete-episodes", nargs="+", type=_episode_list, action="extend", metavar="EPISODES",
                       help="episodes to delete, e.g. 0 3 5 or 0,3,5-9")
    which.add_argument("--keep-episodes", nargs="+", type=_episode_list, action="extend", metavar="EPISODES",
                       help="episodes to keep (every other one is deleted), e.g. 1 2 4 5 or 1-2,4-5")
    edit.add_argument("--drop-features", nargs="+", action="extend", metavar="FEATURE",
                      help="features to remove (e.g. a camera some episodes lack); LeRobot's own columns stay")
    edit.add_argument("--dry-run", action="store_true",
                      help="only say what would change (nothing is written; only metadata is read, and with --push "
                           "the token and the remote are checked)")
    edit.add_argument("--revision", default=None, help="Hub source: branch, tag or commit to copy from")
    edit.add_argument("--token", default=None,
                      help="Hub token, to read the source and to push (default: `hf auth login`'s)")
    edit.add_argument("--push", default=None, metavar="REPO_ID",
                      help="then publish the edited store to this Hub dataset repo as LeRobot v3.0 (as `push`)")
    _push_options(edit, "--branch")

    push = sub.add_parser("push", help="publish a store to a Hub dataset repo as LeRobot v3.0 (one commit)")
    push.add_argument("store", type=Path, help="the store folder (see `cache ls` for the cached ones)")
    push.add_argument("repo_id", help="Hub dataset repo id org/name (created if missing)")
    push.add_argument("--token", default=None, help="Hub token with write access (default: `hf auth login`'s)")
    push.add_argument("--episodes", type=_episode_list, default=None, metavar="0,3,5-9",
                      help="publish only these episodes of the store, as a new dataset renumbered from 0 (default: "
                           "every episode; a store lacking some is refused)")
    _push_options(push, "--revision", "--branch")

    check = sub.add_parser(
        "verify", help="re-read a store and check every committed episode against its recorded content hashes",
        description="Re-read every committed episode of a store (every feature's rows, compact cameras' encoded "
                    "frames, mp4 files) and compare each with the content hash (crc32c) recorded when it was "
                    "committed; also check pack files, shard indexes and zarr's copies of the commit. Exit status: "
                    "0 intact, 1 damage found, 3 nothing damaged but some episodes cannot be checked (no hash "
                    "recorded). Sampling never checks; run this after copying a store or when in doubt.")
    check.add_argument("store", type=Path, help="the store folder (see `cache ls` for the cached ones)")
    check.add_argument("--repair", action="store_true",
                       help="fix what can be: zarr's copies, interrupted edits, planted links, and damaged episodes "
                            "fetched again from the Hub repo or folder the store was made from")
    check.add_argument("--record", action="store_true",
                       help="record hashes for committed episodes that have none (stores made before hashes "
                            "existed), trusting their bytes as they are now")
    check.add_argument("--token", default=None, help="Hub token, to fetch damaged episodes again (--repair)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")

    cache = sub.add_parser("cache", help="list or remove the stores under the cache home (like `hf cache`)")
    cache_sub = _Subcommands(cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION"), common)
    ls = cache_sub.add_parser("ls", help="list stores: source, revision, size, episodes, last use")
    ls.add_argument("--json", action="store_true", help="print as JSON")
    rm = cache_sub.add_parser("rm", help="remove stores: a store path, a repo id (all its commits), repo@commit, "
                                         "or a LeRobot folder (its stores)")
    rm.add_argument("targets", nargs="+", metavar="TARGET", help="what to remove")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    rm.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    prune = cache_sub.add_parser("prune", help="remove stores nothing points to any more: old Hub commits, stores of "
                                               "folders that changed or are gone, never-committed transcodes")
    prune.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    prune.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    return parser


class _Subcommands:
    """``add_parser`` giving every command the common options (``-v``)."""

    def __init__(self, action: Any, common: argparse.ArgumentParser):
        self.action, self.common = action, common

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return self.action.add_parser(name, parents=[self.common], **kwargs)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    text = str(message)
    if issubclass(category, LeRobotZarrWarning) or category is UserWarning:
        print(f"lerobot-zarr: warning: {text}", file=sys.stderr)
    else:
        print(f"lerobot-zarr: warning: {text} ({category.__name__} at {Path(filename).name}:{lineno})",
              file=sys.stderr)


def _age(seconds: float) -> str:
    seconds = max(0.0, time.time() - seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"


def _confirm(question: str, yes: bool) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        print(f"{question} -- not confirmed (no terminal): pass --yes", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _cache(args: argparse.Namespace) -> int:
    from ..api import cache_home
    from ..store.cache import cache_info, find_stores, prune_candidates, remove_store

    if args.cache_command == "ls":
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
            print(f"{rev:<12} {_mb(s.size_bytes):>10} {f'{s.episodes}/{s.total_episodes}':>11} "
                  f"{_age(s.last_used):>12}  {s.source}{extra}")
            print(f"  {s.path}")
        print(f"{len(stores)} stores, {_mb(sum(s.size_bytes for s in stores))}")
        return 0
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
        print(f"  {s.source} {(s.revision or '')[:12]}  {_mb(s.size_bytes)}  ({why})\n    {s.path}")
    total = sum(s.size_bytes for s, _ in plan)
    if args.dry_run:
        print(f"would remove {len(plan)} stores, {_mb(total)}")
        return 0
    if not _confirm(f"remove {len(plan)} stores ({_mb(total)})?", args.yes):
        return 1
    freed, failed = 0, 0
    for s, _ in plan:
        try:
            freed += remove_store(s.path)
        except (LeRobotZarrError, ValueError, OSError) as exc:
            print(f"lerobot-zarr: not removed: {exc}", file=sys.stderr)
            failed += 1
    print(f"removed {len(plan) - failed} stores, {_mb(freed)} freed")
    return 1 if failed else 0


def _camera_option(text: str) -> tuple[str, str]:
    camera, sep, value = text.rpartition("=")
    if not sep or not camera or not value:
        raise argparse.ArgumentTypeError(f"expected CAMERA=VALUE, got {text!r}")
    return camera, value


def _camera_size(text: str) -> tuple[str, tuple[int, int]]:
    camera, value = _camera_option(text)
    height, sep, width = value.lower().partition("x")
    if not sep or not height.isdigit() or not width.isdigit():
        raise argparse.ArgumentTypeError(f"expected CAMERA=HxW such as cam=224x224, got {text!r}")
    return camera, (int(height), int(width))


def _edit_plan(meta: Any, where: str, args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """``(episodes to delete, features to drop)`` of an ``edit`` on a dataset described by ``meta``, checked
    before anything is written: a typed error names the first bad episode or feature."""
    from ..errors import ArgumentError, FrameIndexError

    n = meta.total_episodes
    # each EPISODES word is a list (0,3,5-9): one flat list
    keep = None if args.keep_episodes is None else [e for part in args.keep_episodes for e in part]
    asked = keep if keep is not None else [e for part in args.delete_episodes or [] for e in part]
    bad = [e for e in asked if not 0 <= e < n]
    if bad:
        span = f"0 to {n - 1}" if n else "none"
        raise FrameIndexError(f"{where}: episode {bad[0]} does not exist ({n} episodes: {span}); nothing was "
                              f"changed", path=where, episode=bad[0])
    if keep is not None:
        gone = sorted(set(range(n)) - set(keep))
    else:
        gone = sorted(set(asked))
    if n and len(gone) == n:
        raise ArgumentError(f"{where}: this would delete all {n} episodes; nothing was changed")
    drop = list(dict.fromkeys(args.drop_features or []))
    unknown = [name for name in drop if name not in meta.features]
    if unknown:
        raise ArgumentError(f"{where}: no feature {unknown[0]!r} to drop (features: {list(meta.features)}); nothing "
                            f"was changed", path=where, feature=unknown[0])
    own = [name for name in drop if name in DEFAULT_FEATURES]
    if own:
        raise ArgumentError(f"{where}: {own} are LeRobot's own columns and cannot be dropped; nothing was changed",
                            path=where, feature=own[0])
    return gone, drop


def _camera_status(meta: Any, name: str, episodes: Sequence[int], *, renumbered: bool = False) -> str:
    """A camera's availability over ``episodes`` (``renumbered``: shown by position, as after a deletion); in a
    store, episodes it does not hold yet are only known once fetched."""
    if name in meta.not_materialized:
        return f"not stored ({meta.not_materialized[name]})"
    reasons = meta.unavailable.get(name, {})
    is_store = _is_store(meta)  # else a source's metadata
    held = [e for e in episodes if meta.materialized_episodes[e]] if is_store else list(episodes)
    shown = {e: k for k, e in enumerate(episodes)} if renumbered else {e: e for e in episodes}
    lacking = [shown[e] for e in held if e in reasons]
    unknown = len(episodes) - len(held)
    later = f"; {unknown} episodes not fetched yet, checked when they are" if unknown else ""
    if not lacking:
        return f"complete ({len(held)} episodes{' held' if unknown else ''}){later}"
    return f"missing in {len(lacking)} of {len(held)} episodes{' held' if unknown else ''} " \
           f"{_episode_list_text(lacking)}{later}"


def _edit_summary(before: Any, gone: list[int], drop: list[str], after: Any | None) -> list[str]:
    """Lines saying what an edit changes: episodes and frames before -> after, features dropped, cameras."""
    n = before.total_episodes
    deleted = set(gone)
    kept = [e for e in range(n) if e not in deleted]
    frames_after = after.total_frames if after is not None else int(before.episode_length[kept].sum())
    episodes_after = after.total_episodes if after is not None else len(kept)
    lines = [f"episodes:   {n} -> {episodes_after}"
             + (f" (deleted {len(gone)}: {_episode_list_text(gone)}; kept {_episode_list_text(kept)}, renumbered "
                f"from 0)" if gone else " (none deleted)"),
             f"frames:     {before.total_frames} -> {frames_after}",
             f"features:   dropped {drop}" if drop else "features:   none dropped"]
    for name in before.camera_keys:
        was = _camera_status(before, name, range(n))
        if name in drop:
            now = "dropped"
        elif after is not None:
            now = _camera_status(after, name, range(after.total_episodes))
        else:
            now = _camera_status(before, name, kept, renumbered=bool(gone))
        lines.append(f"camera {name}: {was} -> {now}")
    return lines


def _edit(args: argparse.Namespace) -> int:
    """``lerobot-zarr edit``: check the plan on metadata first (no data read), then open the store for writing,
    drop features, delete episodes, and push if asked."""
    from ..api import inspect, open_dataset
    from ..sampling.dataset import DatasetMeta
    from ..errors import ArgumentError
    from ..writing.export import check_push
    from ..resolve import resolve_source
    from ..store.state import has_commit_point, read_state

    if not (args.delete_episodes or args.keep_episodes or args.drop_features or args.push):
        raise ArgumentError("edit: nothing to do; give --delete-episodes, --keep-episodes, --drop-features or --push")
    src = resolve_source(args.source, revision=args.revision, token=args.token)
    notes = []
    if src.kind == "store":
        if args.root is not None and args.root.resolve() != src.path.resolve():
            raise ArgumentError(f"{src.path} is a store: it is edited in place, --root does not apply")
        target = src.path
        before = DatasetMeta.from_state(read_state(target))
        lacking = int((~before.materialized_episodes).sum())
        if lacking:
            notes.append(f"the store lacks {lacking} of its {before.total_episodes} episodes: writing fetches them "
                         f"from its source first")
    else:
        if args.root is None:
            raise ArgumentError(f"{src}: a LeRobot folder or Hub repo is edited in a store of its own, so that "
                                f"other opens of the source keep reading its data: pass --root DIR (a new folder)")
        target = args.root.expanduser()
        if has_commit_point(target):
            before = DatasetMeta.from_state(read_state(target))
            notes.append(f"editing further the existing store {target} (episode indices are its own)")
        else:
            before = inspect(args.source, revision=args.revision, token=args.token)
            notes.append(f"{target} is made a writable copy of {src} with all its {before.total_episodes} episodes "
                         f"first")
    gone, drop = _edit_plan(before, str(target), args)
    if args.push:  # the token, its write access and the remote's state, before anything changes
        check_push(None, args.push, revision=args.branch, token=args.token)
    if args.dry_run:
        print(f"dry run: edit {target} ({source_line(before.source) if src.kind == 'store' else src})")
        for line in [*notes, *_edit_summary(before, gone, drop, None)]:
            print(f"  {line}")
        if args.push:
            print(f"  then push to {args.push}" + (f"@{args.branch}" if args.branch else "")
                  + " (token and write access checked)")
        print("dry run: nothing was changed")
        return 0
    for note in notes:
        log.info(note)
    with open_dataset(args.source, root=None if src.kind == "store" else target, mode="r+", revision=args.revision,
                      token=args.token) as ds:
        before = ds.meta
        gone, drop = _edit_plan(before, str(target), args)  # the same plan on the store itself
        if args.push:  # the remote holds nothing, or this dataset as it will be after the edit
            kept = np.setdiff1d(np.arange(before.total_episodes), gone).tolist()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LeRobotZarrWarning)
                check_push(ds.select(kept), args.push, revision=args.branch, token=args.token, drop=drop)
        if drop:
            ds.drop_features(drop)
        if gone:
            ds.delete_episodes(gone)
        print(f"edited {target} ({source_line(before.source)})")
        for line in _edit_summary(before, gone, drop, ds.meta):
            print(f"  {line}")
        if args.push:
            try:
                _push(ds, str(target), args.push, args)
            except (LeRobotZarrError, ValueError, OSError) as exc:
                again = f"lerobot-zarr push {target} {args.push}" + (f" --branch {args.branch}" if args.branch else "")
                print(f"lerobot-zarr: error: {exc}\nlerobot-zarr: the edit of {target} is applied (committed); the "
                      f"push failed: to publish it, run `{again}`", file=sys.stderr)
                if args.verbose:
                    raise
                return 1
    return 0


def _run(args: argparse.Namespace) -> int:
    from ..api import inspect, open_dataset

    if args.command == "demo":
        from .demo import run_demo

        run_demo(args.dir, n_episodes=args.episodes)
    elif args.command == "info":
        meta = inspect(args.source, revision=args.revision, token=args.token)
        print(json.dumps(describe_json(meta), indent=2, default=str) if args.json else describe(meta))
    elif args.command in ("convert", "download"):
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
        print(json.dumps(describe_json(ds.meta), indent=2, default=str) if args.json else describe(ds.meta))
    elif args.command == "view":
        from ..integrations.view import view_episode

        png = view_episode(args.source, args.episode, out=args.out, rrd=args.rrd, revision=args.revision,
                           token=args.token, live="spawn" if args.spawn else "serve" if args.serve else None)
        print(f"wrote {png}" + (f" and {args.rrd}" if args.rrd else ""))
    elif args.command == "push":
        from ..sampling.dataset import LeRobotZarrDataset

        ds = LeRobotZarrDataset(args.store)
        if args.episodes is not None:
            ds = ds.select(args.episodes)  # the export warns which episodes it publishes, renumbered
        _push(ds, str(args.store), args.repo_id, args)
    elif args.command == "edit":
        return _edit(args)
    elif args.command == "cache":
        return _cache(args)
    elif args.command == "verify":
        return _verify(args)
    return 0


def _verify(args: argparse.Namespace) -> int:
    from ..writing.integrity import verify

    if not (args.store / "zarr.json").is_file():
        raise SourceNotFoundError(f"{args.store}: not a lerobot_zarr store (no zarr.json); verify checks a store "
                                  f"(see `lerobot-zarr cache ls`)", path=args.store)
    report = verify(args.store, repair=args.repair, record=args.record, token=args.token)
    print(json.dumps(report.to_json(), indent=2) if args.json else report.summary())
    if report.damaged or report.store_problems or report.not_repaired:
        return 1
    return 0 if report.ok else 3


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("lerobot-zarr: %(message)s"))
    log.addHandler(handler)
    previous_level = log.level
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)  # libraries' business, not the user's
            warnings.filterwarnings("ignore", category=PendingDeprecationWarning)
            warnings.filterwarnings("default", category=LeRobotZarrWarning)
            warnings.showwarning = _show_warning
            code = _run(args)
            sys.stdout.flush()  # here, so that a closed pipe is met below, not at interpreter exit
            return code
    except BrokenPipeError:  # output piped into a command that stopped reading (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 0
    except (LeRobotZarrError, ValueError, OSError) as exc:
        if args.verbose:
            raise
        print(f"lerobot-zarr: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lerobot-zarr: interrupted (committed episodes are kept; run again to resume)", file=sys.stderr)
        return 130
    finally:
        log.removeHandler(handler)
        log.setLevel(previous_level)


if __name__ == "__main__":
    sys.exit(main())
