"""``lerobot-zarr doctor``: every defect of a dataset, named: the report a store keeps (made as it was transcoded),
or a check of a LeRobot folder or Hub repo read once without making a store.

Exit status 0 (findings are the report, not an error), or 1 with ``--fail-on SEVERITY`` when a finding is that
severe or more."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import ArgumentError
from .options import episode_list

__all__ = ["add_parser", "run", "source_files"]


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``doctor`` command and its options."""
    from ..doctor.kinds import SEVERITIES

    doctor = subparsers.add_parser(
        "doctor", parents=[common],
        help="find and name every defect of a dataset (frozen cameras, short videos, drifting timestamps, NaN, "
             "glitches, duplicates, wrong stats...)",
        description="Report the defects of a dataset, one line each after a summary: kind, episode, feature, "
                    "frames and what was measured. A store shows the report its transcode made (at once; "
                    "--recheck runs the checks again over its data). A LeRobot folder or Hub repo is read once, "
                    "every video decoded, nothing written; what the transcode refuses outright (timestamps not "
                    "1/fps apart, rows of another episode, tables that contradict each other) is reported too. "
                    "Nothing changes the data: `lerobot-zarr edit --drop-defective` removes defective episodes.")
    doctor.add_argument("source", help="a store, a LeRobot dataset folder, or a Hub repo id org/name")
    doctor.add_argument("--recheck", action="store_true",
                        help="a store: run every check again over its data and keep the new report")
    doctor.add_argument("--episodes", type=episode_list, default=None,
                        help="a folder or Hub repo: only these episodes, e.g. 0,3,5-9 (default: all)")
    doctor.add_argument("--no-videos", action="store_true",
                        help="a folder or Hub repo: do not decode the videos (their checks are skipped)")
    doctor.add_argument("--revision", default=None, help="Hub branch, tag or commit (default: LeRobot's choice)")
    doctor.add_argument("--token", default=None, help="Hub token (default: the one `hf auth login` saved)")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--fail-on", choices=SEVERITIES, default=None, metavar="SEVERITY",
                        help=f"exit with status 1 when a finding is this severe or more ({', '.join(SEVERITIES)})")
    return doctor


def run(args: argparse.Namespace) -> int:
    from ..doctor.findings import read_report
    from ..doctor.kinds import SEVERITIES
    from ..doctor.scan import doctor_source, doctor_store
    from ..sources.resolve import resolve_source

    src = resolve_source(args.source, revision=args.revision, token=args.token)
    store = src.store()
    if store is not None:
        if args.episodes is not None or args.no_videos:
            raise ArgumentError(f"{store} is a store: --episodes and --no-videos apply to a folder or Hub repo "
                                f"(a store's report covers the episodes it holds; --recheck checks them again)")
        report = None if args.recheck else read_report(store)
        if report is None:
            report = doctor_store(store)
    else:
        if args.recheck:
            raise ArgumentError(f"{src}: --recheck applies to a store; a folder or Hub repo is checked afresh each "
                                f"time")
        report = doctor_source(source_files(src), episodes=args.episodes, videos=not args.no_videos)
    print(json.dumps(report.to_json(), indent=2) if args.json else report.text())
    if args.fail_on is not None:
        worst = SEVERITIES[: SEVERITIES.index(args.fail_on) + 1]
        hits = [d for d in report.defects if d.severity in worst]
        if hits:
            print(f"lerobot-zarr: {len(hits)} findings of severity {' or '.join(worst)}", file=sys.stderr)
            return 1
    return 0


def source_files(src: Any) -> Any:
    """The files of the LeRobot dataset ``src`` names (a Hub repo at its resolved revision); a store elsewhere (in
    a bucket) is refused: the doctor reads a store here."""
    if src.remote() is not None:
        raise ArgumentError(f"{src}: a store in a bucket: copy it (`lerobot-zarr sync {src} DIR`) and run the "
                            f"doctor on the copy")
    return src.files()
