"""Fuzz test of source reading (issue 13): random edits of ``meta/info.json`` and of the episode table (v3 parquet,
v2.1 jsonl) of a small generated dataset always give the original frames or a typed lerobot_zarr error, never
another exception and never a hang (see lerobot_zarr.testing.source_fuzz). A bounded number of examples here
(``LEROBOT_ZARR_FUZZ_EXAMPLES``, default 25 per format); ``benchmarks/fuzz_sources.py --examples N`` runs more."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from lerobot_zarr.testing.source_fuzz import check, make_base, mutations

EXAMPLES = int(os.environ.get("LEROBOT_ZARR_FUZZ_EXAMPLES", "25"))


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    return {version: make_base(root / version, version) for version in ("v3.0", "v2.1")}


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_damaged_metadata_gives_the_frames_or_a_typed_error(bases, version, monkeypatch):
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(Path(tempfile.gettempdir()) / "lerobot_zarr_fuzz_unused"))
    base = bases[version]
    outcomes: dict[str, int] = {}

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(edits=mutations(base))
    def run(edits):
        with tempfile.TemporaryDirectory(prefix="lerobot_zarr-fuzz-") as work:
            outcome = check(base, edits, Path(work))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    run()
    assert sum(outcomes.values()) >= EXAMPLES
    assert "ok" in outcomes and len(outcomes) > 1, f"the examples did not exercise both outcomes: {outcomes}"


def test_the_oracle_catches_wrong_frames(bases, tmp_path):
    """check() must fail when the frames differ from the data files: shift one value of the reference."""
    base = bases["v3.0"]
    base.reference["action"][3] = base.reference["action"][3] + 1
    try:
        with pytest.raises(AssertionError, match="action"):
            check(base, [("info_set", ("robot_type",), "x")], tmp_path / "work")
    finally:
        base.reference["action"][3] = base.reference["action"][3] - 1
    assert check(base, [("info_set", ("robot_type",), "x")], tmp_path / "work") == "ok"
