"""Fuzz stores as untrusted input: random damage to any file of a store (or a symbolic link in any position) must
end in a typed error, correct samples, or a verify() report naming the damage; never a wrong value after verify()
passed, never a write outside the store. The cases and properties are lerobot_zarr.testing.store_fuzz's;
tests/store/test_store_fuzz.py runs a few hundred, this script many, and prints how they ended.

Run:  .venv/bin/python benchmarks/fuzz_stores.py [--cases 5000] [--seed 0] [--kind flip]
Exits 1 (and prints the failing case) if a property fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from lerobot_zarr.testing.store_fuzz import MUTATIONS, FuzzFailure, check, make_bases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=5000, help="cases in all (default 5000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", choices=sorted(MUTATIONS), default=None, help="only this kind of damage")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    outcomes: dict[str, int] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        bases = make_bases(Path(tmp) / "bases")
        for k in range(args.cases):
            base = bases[k % len(bases)]
            with tempfile.TemporaryDirectory(dir=tmp) as work:
                try:
                    outcome = check(base, Path(work), rng, args.kind)
                except FuzzFailure as failure:
                    print(f"case {k}: FAILED: {failure}", file=sys.stderr)
                    return 1
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if (k + 1) % 500 == 0:
                print(f"{k + 1} cases, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print(f"{args.cases} cases in {time.perf_counter() - started:.0f} s, every property held:")
    for outcome, n in sorted(outcomes.items(), key=lambda kv: -kv[1]):
        print(f"  {n:6d}  {outcome}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
