"""Hostile-store fuzz (``lerobot_zarr.testing.store_fuzz``): random damage to any file of a store, or a symbolic
link in any position, ends in a typed error, a correct sample, or a ``verify()`` report naming the damage; never a
wrong value after ``verify()`` passed, never a write outside the store. ``LEROBOT_ZARR_STORE_FUZZ_CASES`` cases in
all (default 240, about 20 s); ``benchmarks/fuzz_stores.py --cases N`` runs many more."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from lerobot_zarr.testing.store_fuzz import MUTATIONS, check, make_bases

CASES = int(os.environ.get("LEROBOT_ZARR_STORE_FUZZ_CASES", "240"))


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return make_bases(tmp_path_factory.mktemp("store_fuzz"))


def test_the_bases_are_intact_and_sample_as_their_oracle(bases):
    from lerobot_zarr import verify

    assert {b.name for b in bases} >= {"folder", "recorded"}
    for base in bases:
        assert verify(base.path, progress=False).ok, base.name
        assert base.reference and base.items


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
def test_store_fuzz(bases, tmp_path, kind):
    """Every kind of damage on every base, CASES cases in all (seeded: the same cases each run)."""
    rng = np.random.default_rng(sum(map(ord, kind)))
    outcomes: dict[str, int] = {}
    per_kind = max(len(bases), CASES * MUTATIONS[kind][1] // sum(w for _, w in MUTATIONS.values()))
    for k in range(per_kind):
        base = bases[k % len(bases)]
        with tempfile.TemporaryDirectory(dir=tmp_path) as work:
            outcome = check(base, Path(work), rng, kind)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(kind, outcomes)
    if kind in ("flip", "root leaf", "swap index", "zero"):  # damage that only the hashes (or the root's) see
        assert any(o.startswith("damage reported") for o in outcomes), outcomes
