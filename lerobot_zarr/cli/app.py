"""The ``lerobot-zarr`` program: the parser assembled from the command modules, the common options, and what
every command shares: logging, warnings on one line, the one-line error format and exit statuses.

Each command module gives ``add_parser(subparsers, common) -> parser`` and ``run(args) -> exit status``;
:data:`COMMANDS` lists them in the order ``--help`` shows them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO

from ..errors import LeRobotZarrError, LeRobotZarrWarning
from . import cache, convert, demo, edit, info, push, sync, verify, view

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


class Command(Protocol):
    """What a command module gives (modules match a protocol by their functions)."""

    def add_parser(self, subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """Add the command to ``subparsers`` (argparse's sub-parsers action) with ``common`` as a parent."""
        ...

    def run(self, args: argparse.Namespace) -> int:
        """Do the command; the exit status."""
        ...


COMMANDS: tuple[Command, ...] = (demo, info, convert, view, edit, push, sync, verify, cache)

DESCRIPTION = """\
Command line: 'lerobot-zarr demo | info | convert (download) | view | edit | push | sync | verify |
cache ls|rm|prune'.

SOURCE is a LeRobot dataset folder (v3.x or v2.x), a store made by lerobot_zarr, a Hub dataset repo id 'org/name',
or a bucket folder holding either (s3://, gs://, az://bucket/folder, hf://buckets/namespace/bucket/folder). Run
'lerobot-zarr COMMAND --help' for each command's options.
"""

log = logging.getLogger("lerobot_zarr")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each command's parser runs its module's ``run`` (``args.run``)."""
    from .. import __version__

    parser = argparse.ArgumentParser(prog="lerobot-zarr", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"lerobot_zarr {__version__}")
    verbose: dict[str, Any] = {"action": "store_true", "help": "log what is done; full tracebacks on errors"}
    parser.add_argument("-v", "--verbose", **verbose)
    # -v also after the command (`lerobot-zarr info X -v`); SUPPRESS keeps the one given before it
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", default=argparse.SUPPRESS, **verbose)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers, common).set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (errors are one ``lerobot-zarr: error:`` line, 1)."""
    args = build_parser().parse_args(argv)
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
            code = args.run(args)
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


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """Warnings as one ``lerobot-zarr: warning:`` line; others' with their class and place."""
    text = str(message)
    if issubclass(category, LeRobotZarrWarning) or category is UserWarning:
        print(f"lerobot-zarr: warning: {text}", file=sys.stderr)
    else:
        print(f"lerobot-zarr: warning: {text} ({category.__name__} at {Path(filename).name}:{lineno})",
              file=sys.stderr)
