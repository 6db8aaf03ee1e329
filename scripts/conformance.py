"""LeRobot's own dataset tests as lerobot_zarr's conformance suite: run them with the drop-ins in place of LeRobot's
classes (``scripts/conformance_plugin.py``), optionally with LeRobot's own classes too, and compare test by test.

    python scripts/conformance.py LEROBOT_SRC                       # the drop-ins (LeRobot records, they read)
    python scripts/conformance.py LEROBOT_SRC --against lerobot     # and LeRobot's classes, then the difference
    python scripts/conformance.py LEROBOT_SRC --against lerobot.json --save ours.json -- -k aggregate

``LEROBOT_SRC`` is a LeRobot source checkout (its ``tests/`` folder; tag v0.6.1) and ``--python`` a Python where
that lerobot is installed with its ``dataset`` extra, torch and pytest (default: this one). It prints pass / fail /
error / skip counts of each run and every test whose outcome differs. ``--save`` keeps a run's outcomes as JSON,
which ``--against`` takes instead of running LeRobot's classes again (that run takes minutes). Without LeRobot's
sources or lerobot it says so and exits 0 (nothing to check).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_TESTS = ["tests/datasets", "tests/utils/test_replay_buffer.py", "tests/rl/test_data_mixer.py"]
OUTCOMES = ("passed", "failed", "error", "skipped")


def run(python: str, lerobot_src: Path, mode: str, tests: list[str], extra: list[str]) -> dict[str, str]:
    """One pytest run of LeRobot's tests in ``mode``; the outcome of each test, by node id."""
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        report = Path(tmp) / "report.xml"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(HERE), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
        env.setdefault("LEROBOT_ZARR_HOME", str(Path(tmp) / "lerobot_zarr-home"))  # the drop-ins' stores
        cmd = [python, "-m", "pytest", "-p", "conformance_plugin", f"--drop-in={mode}", "-p", "no:cacheprovider",
               "-q", "--no-header", "-rN", "--continue-on-collection-errors", f"--junitxml={report}", *tests, *extra]
        print(f"== {mode}: {' '.join(cmd[1:])}", flush=True)
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=lerobot_src, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        tail = [line for line in proc.stdout.splitlines() if line.strip()][-1:]
        print(f"   {tail[0] if tail else '(no output)'} [{time.monotonic() - start:.0f} s, pytest exit "
              f"{proc.returncode}]", flush=True)
        if not report.exists():
            print(proc.stdout[-4000:])
            raise SystemExit(f"pytest wrote no report (exit {proc.returncode})")
        return outcomes(report, lerobot_src)


def node_id(classname: str, name: str, root: Path) -> str:
    """pytest's node id of a junit test case (``tests.datasets.test_depth.TestX`` -> ``tests/datasets/test_depth.py
    ::TestX::name``): the longest prefix of the class name that is a test file under ``root``."""
    if not classname:  # a module that failed to collect: pytest names it in ``name``, dotted
        path = Path(*name.split(".")).with_suffix(".py")
        return path.as_posix() if (root / path).is_file() else name
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        path = Path(*parts[:i]).with_suffix(".py")
        if (root / path).is_file():
            return "::".join([path.as_posix(), *parts[i:], name])
    return f"{classname}::{name}"


def outcomes(report: Path, root: Path) -> dict[str, str]:
    """Each test of a junit report and its outcome (a failure in the test wins over an error around it)."""
    result: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        test = node_id(case.get("classname", ""), case.get("name", ""), root)
        tags = {child.tag for child in case}
        outcome = ("failed" if "failure" in tags else "error" if "error" in tags else
                   "skipped" if "skipped" in tags else "passed")
        if result.get(test) not in ("failed", "error"):
            result[test] = outcome
    return result


def counts(results: dict[str, str]) -> str:
    c = Counter(results.values())
    return ", ".join(f"{c[o]} {o}" for o in OUTCOMES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lerobot_src", type=Path, help="LeRobot's source checkout (holding tests/)")
    parser.add_argument("--mode", choices=("read", "full"), default="read",
                        help="read: LeRobot records, the drop-ins read (default); full: the drop-ins alone")
    parser.add_argument("--against", default=None,
                        help="'lerobot' to run LeRobot's own classes too, or a JSON file a --save wrote")
    parser.add_argument("--save", type=Path, default=None, help="write the drop-in run's outcomes as JSON here")
    parser.add_argument("--save-against", type=Path, default=None,
                        help="write the outcomes of the --against lerobot run as JSON here")
    parser.add_argument("--python", default=sys.executable, help="the Python holding lerobot, torch and pytest")
    parser.add_argument("--tests", nargs="+", default=DEFAULT_TESTS, help="test paths inside LEROBOT_SRC")
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []  # more pytest arguments, after --
    args = parser.parse_args(argv[:len(argv) - len(extra) - bool(extra or "--" in argv)])

    if not (args.lerobot_src / "tests" / "conftest.py").is_file():
        print(f"skipped: {args.lerobot_src} holds no LeRobot test suite (tests/conftest.py)")
        return 0
    probe = subprocess.run([args.python, "-c", "import lerobot, torch, pytest"], capture_output=True, text=True)
    if probe.returncode:
        print(f"skipped: {args.python} cannot import lerobot, torch and pytest "
              f"({probe.stderr.strip().splitlines()[-1:]})")
        return 0

    ours = run(args.python, args.lerobot_src, args.mode, args.tests, extra)
    if args.save:
        args.save.write_text(json.dumps(ours, indent=1, sort_keys=True))
    theirs = None
    if args.against == "lerobot":
        theirs = run(args.python, args.lerobot_src, "lerobot", args.tests, extra)
        if args.save_against:
            args.save_against.write_text(json.dumps(theirs, indent=1, sort_keys=True))
    elif args.against:
        theirs = json.loads(Path(args.against).read_text())

    print(f"\ndrop-ins ({args.mode}): {counts(ours)}")
    if theirs is None:
        return 0
    print(f"LeRobot's classes:  {counts(theirs)}")
    differ = sorted(t for t in set(ours) | set(theirs) if ours.get(t) != theirs.get(t))
    print(f"\n{len(differ)} tests differ (LeRobot's classes -> drop-ins):")
    for test in differ:
        print(f"  {theirs.get(test, 'absent'):>7} -> {ours.get(test, 'absent'):<7} {test}")
    regressed = [t for t in differ if theirs.get(t) == "passed"]
    print(f"\n{len(regressed)} tests pass with LeRobot's classes and not with the drop-ins")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
