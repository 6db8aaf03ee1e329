"""The doctor's report kept in a store: a resumed transcode keeps what it found before, a reopened store gives it
back, edits renumber it or make it stale (and say so), drop_defective removes what it names and the export is
clean, ds.doctor() checks again; and the report's files, coming from a store, are untrusted input."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

import lerobot_zarr
from lerobot_zarr.doctor.findings import read_report
from lerobot_zarr.doctor.scan import doctor_source
from lerobot_zarr.errors import ArgumentError, CorruptStoreError, NotMaterializedError
from lerobot_zarr.lerobot.source import LeRobotSource
from lerobot_zarr.testing.defects import LENGTHS, write_case
from lerobot_zarr.writing import transcode as transcode_mod
from lerobot_zarr.writing.transcode import transcode

pytestmark = pytest.mark.filterwarnings("ignore::lerobot_zarr.errors.LeRobotZarrWarning")


def _found(report) -> list[tuple]:
    return [(d.kind, d.episode, d.feature, d.frames) for d in report.defects]


def test_a_resumed_transcode_keeps_the_findings_of_the_episodes_done(tmp_path, monkeypatch):
    case = write_case(tmp_path / "src", "nan")  # NaN in episode 2
    monkeypatch.setattr(transcode_mod, "_COMMIT_EVERY_S", 0.0)
    monkeypatch.setattr(transcode_mod, "_HOLD_S", 0.0)
    original = LeRobotSource._check_episode

    def failing(self, frames, e, path):
        if e == 4:
            raise RuntimeError("boom while reading episode 4")
        original(self, frames, e, path)

    monkeypatch.setattr(LeRobotSource, "_check_episode", failing)
    store = tmp_path / "store"
    with pytest.raises(RuntimeError, match="episode 4"):
        lerobot_zarr.open_dataset(case.path, root=store, progress=False)
    partial = read_report(store)
    assert ("nan", 2, "action", ((10, 13),)) in _found(partial)
    assert partial.checked == ((0, 4),)
    assert any("not checked" in note for note in partial.notes)
    monkeypatch.setattr(LeRobotSource, "_check_episode", original)
    ds = lerobot_zarr.open_dataset(case.path, root=store, progress=False)
    fresh = lerobot_zarr.open_dataset(case.path, root=tmp_path / "fresh", progress=False)
    assert _found(ds.defects) == _found(fresh.defects) == [("nan", 2, "action", ((10, 13),))]
    assert ds.defects.checked == ((0, len(LENGTHS)),)
    assert not [n for n in ds.defects.notes if "stats" in n]  # the sums of both runs cover every episode once
    moments = json.loads((store / ".doctor" / "moments.json").read_text())
    assert moments["covered"] == [[0, len(LENGTHS)]]
    assert moments["features"]["action"]["count"][0] == sum(LENGTHS)


def _moments(store) -> dict:
    return json.loads((store / ".doctor" / "moments.json").read_text())


def test_a_resumed_transcode_reads_back_the_sums_of_episodes_it_did_not_count(tmp_path, monkeypatch):
    """The sums for stats.json and dead channels are kept once, at the end of a transcode: those of the episodes
    a stopped run committed are read back from the store by the next run, the same as a fresh transcode's (here
    the first run's own kept sums are lost too); stats.json is then checked, and a wrong std found."""
    case = write_case(tmp_path / "src", "stats_mismatch")  # observation.state's std of channel 2 doubled
    monkeypatch.setattr(transcode_mod, "_COMMIT_EVERY_S", 0.0)
    monkeypatch.setattr(transcode_mod, "_HOLD_S", 0.0)
    original = LeRobotSource._check_episode

    def failing(self, frames, e, path):
        if e == 3:
            raise RuntimeError("boom while reading episode 3")
        original(self, frames, e, path)

    monkeypatch.setattr(LeRobotSource, "_check_episode", failing)
    store = tmp_path / "store"
    with pytest.raises(RuntimeError, match="episode 3"):
        lerobot_zarr.open_dataset(case.path, root=store, progress=False)
    assert read_report(store).checked == ((0, 3),)
    (store / ".doctor" / "moments.json").unlink(missing_ok=True)
    monkeypatch.setattr(LeRobotSource, "_check_episode", original)
    ds = lerobot_zarr.open_dataset(case.path, root=store, progress=False)
    fresh = lerobot_zarr.open_dataset(case.path, root=tmp_path / "fresh", progress=False)
    assert _found(ds.defects) == _found(fresh.defects) == [("stats_mismatch", None, "observation.state", ())]
    assert not ds.defects.notes
    resumed, whole = _moments(store), _moments(tmp_path / "fresh")
    assert resumed["covered"] == whole["covered"] == [[0, len(LENGTHS)]]
    for name, part in whole["features"].items():
        for stat, values in part.items():
            if stat in ("sum", "sumsq"):  # float32 values summed in other batches: equal up to their rounding
                np.testing.assert_allclose(resumed["features"][name][stat], values, rtol=1e-5, atol=1e-4)
            else:
                assert resumed["features"][name][stat] == values, (name, stat)


def test_commits_wait_for_the_doctors_batch_instead_of_cutting_it(tmp_path):
    """Episodes fed to the doctor wait for their batch (a few numpy passes over ~32,000 rows) before they are
    committed, unless it is the last commit or they waited the hold time; a commit never lists an episode whose
    findings are not kept yet."""
    from lerobot_zarr.doctor.checkup import Checkup

    case = write_case(tmp_path / "src", "nan")  # NaN in episode 2
    source = LeRobotSource(case.path)
    checkup = Checkup.of_source(source)
    runs = []
    original = checkup.numeric.run

    def counted(episodes, frames, **kwargs):
        runs.append(list(episodes))
        return original(episodes, frames, **kwargs)

    checkup.numeric.run = counted
    for e, frames in source.iter_episodes(range(len(LENGTHS))):
        checkup.frames(e, frames)
        assert checkup.waiting(False, hold_s=3600.0) == list(range(e + 1))  # nothing checked or committable
    assert runs == []
    assert checkup.waiting(False, hold_s=0.0) == []  # waited long enough: checked now, in one batch
    assert runs == [list(range(len(LENGTHS)))]
    assert [(d.kind, d.episode) for found in checkup.take(range(len(LENGTHS))).values() for d in found] == \
        [("nan", 2)]
    checkup.frames(0, next(source.iter_episodes([0]))[1])
    assert checkup.waiting(True, hold_s=3600.0) == [] and len(runs) == 2  # the last commit: checked now


@pytest.fixture
def jump_store(tmp_path):
    case = write_case(tmp_path / "src", "jump")  # a glitch in episode 3, observation.state channel 1, frame 20
    lerobot_zarr.open_dataset(case.path, root=tmp_path / "store", progress=False)
    return case, tmp_path / "store"


def test_deleting_episodes_renumbers_the_findings_and_an_edit_makes_them_stale(jump_store):
    case, store = jump_store
    with lerobot_zarr.open_dataset(store, mode="r+", progress=False) as ds:
        ds.delete_episodes([0])
        report = ds.defects
        assert _found(report) == [("jump", 2, "observation.state", ((20, 21),))]
        assert any("ran before the store was last changed" in n for n in report.notes)
        with ds.edit(2) as ep:  # the glitch fixed by hand: what was found is no longer there
            ep["observation.state"][20, 1] = ep["observation.state"][19, 1]
        ds.flush()
        report = ds.defects
        assert _found(report) == []
        assert any("1 findings no longer apply" in n for n in report.notes)
        assert report.checked == ((0, 2), (3, len(LENGTHS) - 1))  # episode 2 changed since it was checked
        assert any("1 episodes were not checked" in n for n in report.notes)
        again = ds.doctor(progress=False)
    assert _found(again) == [] and again.checked_episodes == len(LENGTHS) - 1
    assert not [n for n in again.notes if "no longer apply" in n]


def test_drop_defective_deletes_what_the_doctor_names_and_the_export_is_clean(jump_store, tmp_path):
    case, store = jump_store
    with lerobot_zarr.open_dataset(store, mode="r+", progress=False) as ds:
        with pytest.raises(ArgumentError, match="unknown defect kind"):
            ds.drop_defective("jumps")
        with pytest.raises(ArgumentError, match="dataset as a whole"):
            ds.drop_defective(["stats_mismatch"])
        assert ds.drop_defective("nan") == []
        assert ds.defects.episodes() == [3]
        assert ds.drop_defective() == [3]
        assert ds.meta.total_episodes == len(LENGTHS) - 1
        assert _found(ds.defects) == []
        exported = ds.to_lerobot(tmp_path / "clean", progress=False)
    assert _found(doctor_source(exported, progress=False)) == []
    source = LeRobotSource(case.path)
    kept = dict(source.iter_episodes([4]))[4]
    with lerobot_zarr.open_dataset(store, progress=False) as ds:  # episode 4 is now episode 3, its data unchanged
        np.testing.assert_array_equal(ds.episode(3)["observation.state"], kept["observation.state"])


def test_drop_defective_is_refused_until_the_doctor_checked_every_episode(tmp_path):
    case = write_case(tmp_path / "src", "jump")
    store = tmp_path / "store"
    transcode(LeRobotSource(case.path), store, progress=False, doctor=False)
    with lerobot_zarr.open_dataset(store, mode="r+", progress=False) as ds:
        assert ds.defects.checked_episodes == 0 and "never ran" in ds.defects.notes[0]
        with pytest.raises(NotMaterializedError, match="checked 0 of the 6 episodes"):
            ds.drop_defective()
        assert ds.meta.total_episodes == len(LENGTHS)
        ds.doctor(progress=False)
        assert ds.drop_defective() == [3]


def test_the_report_files_are_untrusted(jump_store):
    _, store = jump_store
    path = store / ".doctor" / "findings.ndjson"
    good = path.read_text()
    path.write_text(good + '{"v": 1, "episodes": [[3, nu')  # a line cut by a crash: its commit never happened
    assert _found(read_report(store)) == [("jump", 3, "observation.state", ((20, 21),))]
    path.write_text('{"v": 1, "episodes": [[3, null, null]], "defects": [{"kind": "boom", "episode": 3}]}\n' + good)
    with pytest.raises(CorruptStoreError, match="findings.ndjson: unreadable finding"):
        read_report(store)
    path.write_text("[" * 100 + "]" * 100 + "\n" + good)
    with pytest.raises(CorruptStoreError, match="nested too deeply|deeper"):
        read_report(store)
    path.write_text('{"v": 1, "episodes": [[-1, null, null]], "defects": []}\n' + good)
    with pytest.raises(CorruptStoreError, match="not \\[episode, identity, fingerprint\\]"):
        read_report(store)
    path.unlink()
    (store / ".doctor" / "findings.ndjson").symlink_to(store / "zarr.json")
    with pytest.raises(CorruptStoreError):
        read_report(store)


def test_a_writable_copy_of_a_source_keeps_the_report_of_the_cached_store(tmp_path, monkeypatch):
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "home"))
    case = write_case(tmp_path / "src", "constant")  # the whole action of episode 1 frozen
    lerobot_zarr.open_dataset(case.path, progress=False)  # the cache's store, with its report
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = lerobot_zarr.open_dataset(case.path, root=tmp_path / "mine", mode="r+", progress=False)
    with ds:
        assert _found(ds.defects) == [("constant", 1, "action", ((0, LENGTHS[1]),))]
        assert ds.drop_defective("constant") == [1]
    shutil.rmtree(tmp_path / "mine")


def test_a_distributed_transcode_reports_what_one_process_does(tmp_path):
    """The workers of a dask cluster check the episodes they write and hand their findings and sums to the
    process that commits: the same report as a transcode in one process."""
    distributed = pytest.importorskip("distributed")
    case = write_case(tmp_path / "src", "duplicate_episode")  # a reduction over episodes of different workers
    with (distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
          as cluster, distributed.Client(cluster, set_as_default=False) as client):
        ds = lerobot_zarr.open_dataset(case.path, root=tmp_path / "store", client=client, progress=False,
                                       pack_bytes=4096)  # small packs: several tasks
    alone = lerobot_zarr.open_dataset(case.path, root=tmp_path / "alone", progress=False)
    assert _found(ds.defects) == _found(alone.defects) == [("duplicate_episode", 4, None, ((0, LENGTHS[4]),))]
    assert ds.defects.checked_episodes == len(LENGTHS) and ds.defects.notes == alone.defects.notes == []
