"""Fuzz source reading: random edits of info.json and the episode table (v3 parquet, v2.1 jsonl) of a small
generated dataset must give the original frames or a typed lerobot_zarr error (never another exception, never a
hang). The property and the edits are lerobot_zarr.testing.source_fuzz's; tests/lerobot_format/test_source_fuzz.py
runs a few examples, this script many, and prints how the examples ended.

Run:  .venv/bin/python benchmarks/fuzz_sources.py [--examples 2000] [--seed 0] [--version v3.0|v2.1]
Exits 1 (and prints the shrunk failing edits) if the property fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings

from lerobot_zarr.testing.source_fuzz import check, describe, make_base, mutations


def _property(base, outcomes: dict[str, int], tmp: Path, examples: int, random_seed: int):
    """The fuzz property over ``base`` as a hypothesis test; counts each example's outcome into ``outcomes``."""

    @seed(random_seed)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(edits=mutations(base))
    def run(edits):
        with tempfile.TemporaryDirectory(dir=tmp) as work:
            outcome = check(base, edits, Path(work))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=2000, help="examples per format (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--version", choices=("v3.0", "v2.1"), action="append",
                        help="format(s) to fuzz (default both)")
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="fuzz_sources-") as tmp:
        os.environ["LEROBOT_ZARR_HOME"] = str(Path(tmp) / "home")
        for version in args.version or ["v3.0", "v2.1"]:
            base = make_base(Path(tmp) / version, version)
            outcomes: dict[str, int] = {}
            t0 = time.perf_counter()
            try:
                _property(base, outcomes, Path(tmp), args.examples, args.seed)()
            except AssertionError as exc:
                failed = True
                print(f"{version}: PROPERTY FAILED: {exc}", file=sys.stderr)
            print(f"{version}: {sum(outcomes.values())} examples in {time.perf_counter() - t0:.0f} s: "
                  f"{describe(outcomes)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
