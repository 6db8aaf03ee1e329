"""The dataset doctor against its defect battery (lerobot_zarr.testing.defects): every injected defect found and
named (kind, episode, feature, frames), by the transcode (the store's report) and by `doctor SOURCE`'s scan, with
nothing else on the clean twin of each dataset."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import pytest

import lerobot_zarr
from lerobot_zarr.doctor.scan import doctor_source
from lerobot_zarr.errors import LeRobotZarrError
from lerobot_zarr.testing.defects import BATTERY, VIDEO_CASES, Case, write_case

pytestmark = pytest.mark.filterwarnings("ignore::lerobot_zarr.errors.LeRobotZarrWarning")


def _found(report) -> list[tuple]:
    return [(d.kind, d.episode, d.feature, d.frames) for d in report.defects]


def _matches(case: Case, report) -> None:
    """Every expected finding is there, with its frames; no finding of another kind than those injected (or
    brought by the injection)."""
    found = _found(report)
    for want in case.expected:
        hits = [f for f in found if f[:3] == (want.kind, want.episode, want.feature)]
        assert hits, f"{case.kind}: {want} not found in {found}"
        if want.frames is not None:
            assert want.frames in [f[3] for f in hits], f"{case.kind}: {want} found with frames {hits}"
    allowed = {x.kind for x in case.expected} | case.also
    extra = [f for f in found if f[0] not in allowed]
    assert not extra, f"{case.kind}: findings beyond those injected: {extra}"


_CLEAN_CHECKED: set[str] = set()  # many cases share their clean twin: each distinct one is checked once


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("name", list(BATTERY))
def test_battery_case_found_and_named_clean_twin_clean(name, tmp_path):
    if name in VIDEO_CASES:
        pytest.importorskip("av", reason="the video cases need PyAV")
    case = write_case(tmp_path / "bad", name)
    clean = write_case(tmp_path / "clean", name, clean=True)
    _matches(case, doctor_source(case.path, progress=False))
    digest = _digest(clean.path)
    if digest not in _CLEAN_CHECKED:
        assert _found(doctor_source(clean.path, progress=False)) == []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clean_store = lerobot_zarr.open_dataset(clean.path, root=tmp_path / "clean-store", progress=False)
        assert _found(clean_store.defects) == []
        assert clean_store.defects.checked_episodes == clean_store.meta.total_episodes
        _CLEAN_CHECKED.add(digest)
    if not case.transcodes:  # the transcode refuses it, naming the first problem; the scan names them all
        with pytest.raises(LeRobotZarrError):
            lerobot_zarr.open_dataset(case.path, root=tmp_path / "store", progress=False)
        return
    ds = lerobot_zarr.open_dataset(case.path, root=tmp_path / "store", progress=False)
    _matches(case, ds.defects)
    reopened = lerobot_zarr.open_dataset(tmp_path / "store", progress=False)
    assert _found(reopened.defects) == _found(ds.defects)

