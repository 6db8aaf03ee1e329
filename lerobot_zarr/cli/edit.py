"""``lerobot-zarr edit``: clean a dataset in place (delete or keep episodes, drop features, drop the episodes the
dataset doctor found defective), then optionally push.

The plan is checked on metadata first (no data read), with the push's token and remote when ``--push`` is
given, so that a mistake changes nothing; ``--dry-run`` stops there and says what would change.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, FrameIndexError, LeRobotZarrError, LeRobotZarrWarning, NotMaterializedError
from ..lerobot.format import DEFAULT_FEATURES
from ..sampling.meta import DatasetMeta
from .info import is_store
from .options import episode_list
from .push import add_push_options, push_and_report
from .text import episodes_text, source_line

__all__ = ["add_parser", "edit_plan", "edit_summary", "run"]

log = logging.getLogger("lerobot_zarr")


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``edit`` command and its options."""
    edit = subparsers.add_parser(
        "edit", parents=[common],
        help="clean a dataset in place (delete or keep episodes, drop features), then optionally push it",
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
    which.add_argument("--delete-episodes", nargs="+", type=episode_list, action="extend", metavar="EPISODES",
                       help="episodes to delete, e.g. 0 3 5 or 0,3,5-9")
    which.add_argument("--keep-episodes", nargs="+", type=episode_list, action="extend", metavar="EPISODES",
                       help="episodes to keep (every other one is deleted), e.g. 1 2 4 5 or 1-2,4-5")
    edit.add_argument("--drop-features", nargs="+", action="extend", metavar="FEATURE",
                      help="features to remove (e.g. a camera some episodes lack); LeRobot's own columns stay")
    edit.add_argument("--drop-defective", nargs="*", default=None, metavar="KIND",
                      help="delete the episodes in which the dataset doctor found defects of these kinds (default: "
                           "every kind that names episodes, e.g. video_short frozen_frames nan); `lerobot-zarr "
                           "doctor` lists them first")
    edit.add_argument("--dry-run", action="store_true",
                      help="only say what would change (nothing is written; only metadata is read, and with --push "
                           "the token and the remote are checked)")
    edit.add_argument("--revision", default=None, help="Hub source: branch, tag or commit to copy from")
    edit.add_argument("--token", default=None,
                      help="Hub token, to read the source and to push (default: `hf auth login`'s)")
    edit.add_argument("--push", default=None, metavar="REPO_ID",
                      help="then publish the edited store to this Hub dataset repo as LeRobot v3.0 (as `push`)")
    add_push_options(edit, "--branch")
    return edit


def edit_plan(meta: DatasetMeta, where: str, args: argparse.Namespace) -> tuple[list[int], list[str]]:
    """``(episodes to delete, features to drop)`` of an ``edit`` on a dataset described by ``meta``, checked
    before anything is written: a typed error names the first bad episode or feature."""
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


def _check_pyav(meta: DatasetMeta, target: Path, *, store: bool) -> None:
    """Refuse, as the writer would and before anything changes (in a dry run too), an edit that must first decode a
    video camera where PyAV is not installed; the error names the episodes that have a video."""
    from ..cameras.video import have_pyav
    from ..store.state import read_state
    from ..writing.completeness import undecoded_cameras, undecoded_error

    if have_pyav():
        return
    if store:
        undecoded = undecoded_cameras(read_state(target))
    else:  # the writable copy made first decodes every video camera (kept raw) where the episode has a video
        undecoded = {name: [e for e in range(meta.total_episodes) if e not in meta.unavailable.get(name, {})]
                     for name, spec in meta.features.items() if spec.get("dtype") == "video"}
    undecoded = {name: episodes for name, episodes in undecoded.items() if episodes}
    if undecoded:
        name, episodes = next(iter(undecoded.items()))
        raise undecoded_error(target, name, episodes)


def _camera_status(meta: DatasetMeta, name: str, episodes: Sequence[int], *, renumbered: bool = False) -> str:
    """A camera's availability over ``episodes`` (``renumbered``: shown by position, as after a deletion); in a
    store, episodes it does not hold yet are only known once fetched."""
    if name in meta.not_materialized:
        return f"not stored ({meta.not_materialized[name]})"
    reasons = meta.unavailable.get(name, {})
    held = [e for e in episodes if meta.materialized_episodes[e]] if is_store(meta) else list(episodes)
    shown = {e: k for k, e in enumerate(episodes)} if renumbered else {e: e for e in episodes}
    lacking = [shown[e] for e in held if e in reasons]
    unknown = len(episodes) - len(held)
    later = f"; {unknown} episodes not fetched yet, checked when they are" if unknown else ""
    if not lacking:
        return f"complete ({len(held)} episodes{' held' if unknown else ''}){later}"
    return f"missing in {len(lacking)} of {len(held)} episodes{' held' if unknown else ''} " \
           f"{episodes_text(lacking)}{later}"


def edit_summary(before: DatasetMeta, gone: list[int], drop: list[str], after: DatasetMeta | None) -> list[str]:
    """Lines saying what an edit changes: episodes and frames before -> after (``after`` None: as planned),
    features dropped, cameras."""
    n = before.total_episodes
    deleted = set(gone)
    kept = [e for e in range(n) if e not in deleted]
    frames_after = after.total_frames if after is not None else int(before.episode_length[kept].sum())
    episodes_after = after.total_episodes if after is not None else len(kept)
    lines = [f"episodes:   {n} -> {episodes_after}"
             + (f" (deleted {len(gone)}: {episodes_text(gone)}; kept {episodes_text(kept)}, renumbered "
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


def run(args: argparse.Namespace) -> int:
    """Check the plan on metadata first (no data read; with ``--drop-defective`` the doctor's report, which for a
    source without a store means reading it once), then open the store for writing, drop features, delete
    episodes, and push if asked."""
    from ..api import inspect, open_dataset
    from ..doctor.kinds import check_kinds
    from ..hub.http import parse_repo_id
    from ..sources.resolve import resolve_source
    from ..store.state import has_commit_point, read_state
    from ..writing.export import check_push

    if args.push is not None:  # '' too: checked before anything changes, never skipped as if not given
        parse_repo_id(args.push)
    if not (args.delete_episodes or args.keep_episodes or args.drop_features or args.push
            or args.drop_defective is not None):
        raise ArgumentError("edit: nothing to do; give --delete-episodes, --keep-episodes, --drop-features, "
                            "--drop-defective or --push")
    kinds = None if args.drop_defective is None else check_kinds(args.drop_defective or None, droppable=True)
    src = resolve_source(args.source, revision=args.revision, token=args.token)
    notes = []
    store = src.store()
    if store is not None:
        if args.root is not None and args.root.resolve() != store.resolve():
            raise ArgumentError(f"{store} is a store: it is edited in place, --root does not apply")
        target = store
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
    gone, drop = edit_plan(before, str(target), args)
    _check_pyav(before, target, store=has_commit_point(target))
    if kinds is not None:
        report = _report_for_plan(src, target, args)
        gone = _with_defective(gone, report, kinds, before.total_episodes, str(target))
        notes.append(f"the doctor found {', '.join(kinds) if args.drop_defective else 'defects'} in "
                     f"{len(report.episodes(kinds))} episodes ({report.summary()})")
    if args.push:  # the token, its write access and the remote's state, before anything changes
        check_push(None, args.push, revision=args.branch, token=args.token)
    if args.dry_run:
        print(f"dry run: edit {target} ({source_line(before.source) if store is not None else src})")
        for line in [*notes, *edit_summary(before, gone, drop, None)]:
            print(f"  {line}")
        if args.push:
            print(f"  then push to {args.push}" + (f"@{args.branch}" if args.branch else "")
                  + " (token and write access checked)")
        print("dry run: nothing was changed")
        return 0
    for note in notes:
        log.info(note)
    with warnings.catch_warnings():  # an edit samples nothing: its summary says what each camera holds
        warnings.filterwarnings("ignore", ".* is left out of samples", LeRobotZarrWarning)
        opened = open_dataset(args.source, root=None if store is not None else target, mode="r+",
                              revision=args.revision, token=args.token)
    with opened as ds:
        before = ds.meta
        gone, drop = edit_plan(before, str(target), args)  # the same plan on the store itself
        if kinds is not None:  # the doctor's report of the store itself (made with it when it was copied)
            gone = _with_defective(gone, ds.defects, kinds, before.total_episodes, str(target))
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
        for line in edit_summary(before, gone, drop, ds.meta):
            print(f"  {line}")
        if args.push:
            try:
                push_and_report(ds, str(target), args.push, args)
            except (LeRobotZarrError, ValueError, OSError) as exc:
                again = f"lerobot-zarr push {target} {args.push}" + (f" --branch {args.branch}" if args.branch else "")
                print(f"lerobot-zarr: error: {exc}\nlerobot-zarr: the edit of {target} is applied (committed); the "
                      f"push failed: to publish it, run `{again}`", file=sys.stderr)
                if args.verbose:
                    raise
                return 1
    return 0


def _report_for_plan(src: Any, target: Path, args: argparse.Namespace) -> Any:
    """The doctor's report the plan of ``--drop-defective`` is made from: the store's (the one edited), else a check
    of the source read once (a dry run makes no store)."""
    from ..doctor.findings import read_report
    from ..doctor.scan import doctor_source
    from ..store.state import has_commit_point

    if has_commit_point(target):
        report = read_report(target)
        if report is None:
            raise ArgumentError(f"{target}: the doctor never ran on this store; run `lerobot-zarr doctor {target} "
                                f"--recheck` first; nothing was changed", path=target)
        return report
    from .doctor import source_files

    log.info("checking %s with the doctor (the copy made by the edit keeps its own report)", src)
    return doctor_source(source_files(src), progress=True)


def _with_defective(gone: list[int], report: Any, kinds: list[str], n: int, where: str) -> list[int]:
    """``gone`` and the episodes with defects of ``kinds``, refused when the report does not cover every episode or
    nothing would be left."""
    if report.checked_episodes < n:
        raise NotMaterializedError(f"{where}: the doctor checked {report.checked_episodes} of the {n} episodes "
                                   f"({'; '.join(report.notes)[:300]}); run `lerobot-zarr doctor {where} --recheck` "
                                   f"first; nothing was changed", path=where)
    out = sorted(set(gone) | set(report.episodes(kinds)))
    if n and len(out) == n:
        raise ArgumentError(f"{where}: this would delete all {n} episodes; nothing was changed")
    return out
