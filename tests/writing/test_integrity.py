"""Content hashes and ``verify``: every committed episode and feature has a CRC-32C recorded at commit, computed while
its rows were written; ``verify`` re-reads the store and names what differs; ``--repair`` fetches damaged episodes
again from the store's source.

References are independent of the library: hashes are recomputed here with ``google_crc32c`` (zarr's own crc32c)
over the values read from the source with pyarrow / Pillow, or over the pack bytes read by hand from the documented
layout; damage is done by hand to the files.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lerobot_zarr as lz
from lerobot_zarr.cli import main as cli
from lerobot_zarr.errors import CorruptStoreError
from lerobot_zarr.store.state import chunk_path, read_state
from lerobot_zarr.testing.sample_data import write_sample_dataset

NUMERIC = ("observation.state", "action")
IMG, CAM = "observation.images.wrist", "observation.images.front"
SHAPE = (12, 16, 3)
MAIN = Path(__file__).resolve().parents[2]
FEATURES = {"x": {"dtype": "float32", "shape": [3], "names": None},
            "cam": {"dtype": "image", "shape": [6, 8, 3], "names": None}}


def crc(data) -> int:
    return google_crc32c.value(bytes(data))


def source_columns(src: Path) -> dict[str, np.ndarray]:
    """Every frame's numeric columns of a LeRobot v3.0 folder, in global index order (pyarrow only)."""
    tables = [pq.read_table(f) for f in sorted((src / "data").glob("*/*.parquet"))]
    out = {}
    for k in (*NUMERIC, "timestamp", "frame_index", "episode_index", "index", "task_index"):
        out[k] = np.concatenate([np.array(t.column(k).to_pylist()) for t in tables])
    out[IMG] = np.concatenate([np.stack([np.asarray(__import__("PIL.Image").Image.open(io.BytesIO(v["bytes"])))
                                         for v in t.column(IMG).to_pylist()]) for t in tables])
    order = np.argsort(out["index"], kind="stable")
    return {k: v[order] for k, v in out.items()}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return write_sample_dataset(tmp_path_factory.mktemp("integrity") / "src", n_episodes=6, lengths=(8, 14),
                                state_dim=4, action_dim=4, image_keys=(IMG,), image_shape=SHAPE, episodes_per_file=3,
                                seed=5)


@pytest.fixture(scope="module")
def video_source(tmp_path_factory) -> Path:
    pytest.importorskip("av")
    return write_sample_dataset(tmp_path_factory.mktemp("integrity_video") / "src", n_episodes=4, lengths=(6, 9),
                                state_dim=3, action_dim=3, image_shape=SHAPE, video_keys=(CAM,), write_videos=True,
                                episodes_per_file=2, seed=6)


def store_of(source: Path, root: Path, **kwargs) -> Path:
    lz.open_dataset(source, root=root, progress=False, **kwargs)
    return root


# ------------------------------------------------------------------------------------------------ recorded hashes
def test_hashes_recorded_at_transcode_equal_a_crc_of_the_source_values(source, tmp_path):
    root = store_of(source, tmp_path / "s")
    state = read_state(root)
    ref = source_columns(source)
    dtypes = {name: spec.dtype for name, spec in state.arrays.items()}
    for name in (*NUMERIC, "timestamp", "frame_index", "episode_index", "index", "task_index", IMG):
        recorded = state.episode_hashes(name)
        for e in range(6):
            a, b = int(state.table.start[e]), int(state.table.end[e])
            want = crc(np.ascontiguousarray(ref[name][a:b].astype(dtypes[name])).reshape(-1).view(np.uint8))
            assert recorded[e] == want, (name, e)
    assert lz.verify(root, progress=False).ok


def test_compact_camera_hash_covers_each_encoded_frame_with_its_length(source, tmp_path):
    """The hash of a compact camera is over (8-byte length, bytes) of each frame in row order, read here from
    the shard's index at the start of the pack file."""
    root = store_of(source, tmp_path / "s", storage={IMG: "lossless"})
    state = read_state(root)
    recorded = state.episode_hashes(IMG)
    for e in range(6):
        pack, offset, n = int(state.table.chunk[e]), int(state.table.offset[e]), int(state.table.length[e])
        rows = int(state.packs.rows[pack])
        data = Path(chunk_path(root, IMG, pack, 4)).read_bytes()
        index = np.frombuffer(data[:16 * rows], "<u8").reshape(rows, 2)
        h = b"".join(int(nb).to_bytes(8, "little") + data[o:o + nb] for o, nb in index[offset:offset + n].tolist())
        assert recorded[e] == crc(h), e
    assert lz.verify(root, progress=False).ok


def test_mp4_camera_hash_is_the_file_and_mp4_json_has_its_own(video_source, tmp_path):
    root = store_of(video_source, tmp_path / "s", storage={CAM: "mp4"})
    state = read_state(root)
    index = json.loads((root / CAM / "mp4.json").read_bytes())
    recorded = state.episode_hashes(CAM)
    for e in range(4):
        assert recorded[e] == crc((root / CAM / "videos" / index["files"][index["file"][e]]).read_bytes())
    assert state.hashes.files[f"{CAM}/mp4.json"] == crc((root / CAM / "mp4.json").read_bytes())
    report = lz.verify(root, progress=False)
    assert report.ok and report.checked == 4 * len(state.arrays), report


def writer_store(root: Path, **kwargs) -> lz.WritableDataset:
    ds = lz.create(root, fps=10, features=FEATURES, durable=False, pack_bytes=4 * 6 * 8 * 3 * 10, **kwargs)
    rng = np.random.default_rng(0)
    for k in range(6):
        n = 5 + k
        ds.add_episode({"x": rng.random((n, 3), dtype=np.float32),
                        "cam": rng.integers(0, 255, (n, 6, 8, 3), dtype=np.uint8)}, task=f"t{k % 2}")
    return ds


def assert_hashes_are_the_rows(root: Path) -> None:
    """Every recorded hash equals a crc32c of the episode's rows, read from the pack file by hand."""
    state = read_state(root)
    for name, spec in state.arrays.items():
        recorded = state.episode_hashes(name)
        for e in range(len(state.table)):
            pack, offset, n = int(state.table.chunk[e]), int(state.table.offset[e]), int(state.table.length[e])
            with open(chunk_path(root, name, pack, spec.ndim), "rb") as f:
                f.seek(offset * spec.frame_bytes)
                assert recorded[e] == crc(f.read(n * spec.frame_bytes)), (name, e)


def test_every_writer_operation_records_the_hash_of_what_it_wrote(tmp_path):
    ds = writer_store(tmp_path / "s")
    assert_hashes_are_the_rows(ds.root)
    with ds.edit(2, frames=slice(1, 3)) as ep:
        ep["x"][:] = 7.0
    pending = lz.verify(ds.root, progress=False)
    assert not pending.damaged and {k: list(v) for k, v in pending.unverifiable.items()} == {"x": [2]}, pending
    ds.flush()
    assert_hashes_are_the_rows(ds.root)
    ds.delete_frames(3, slice(0, 2))
    ds.set_task([0, 4], "new task")
    ds.delete_episodes([1, 2])  # leaves packs mostly dead: compaction moves episodes, carrying their hashes
    assert_hashes_are_the_rows(ds.root)
    report = ds.verify(progress=False)
    assert report.ok and report.checked == len(ds.meta.episode_length) * len(ds.array_specs), report
    ds.close()
    ring = writer_store(tmp_path / "ring", capacity_frames=30)
    ring.close()
    assert_hashes_are_the_rows(ring.root)
    assert lz.verify(ring.root, progress=False).ok


def test_an_edit_in_progress_is_unverifiable_not_damaged(tmp_path):
    ds = writer_store(tmp_path / "s")
    with ds.edit(1) as ep:
        ep["x"][:] = 3.0
        report = lz.verify(ds.root, progress=False)
    assert not report.damaged and set(report.unverifiable) == {"x"} and list(report.unverifiable["x"]) == [1]
    assert "edited in place" in report.unverifiable["x"][1]
    ds.close()
    assert lz.verify(ds.root, progress=False).ok


KILL_IN_EDIT = textwrap.dedent("""
    import os, sys
    import lerobot_zarr as lz
    ds = lz.open_dataset(sys.argv[1], mode="r+")
    with ds.edit(2) as ep:
        ep["x"][:] = 5.0
        os._exit(3)  # killed inside the edit block: values written, nothing committed
""")


def test_an_edit_cut_short_by_a_kill_is_hashed_by_the_next_writer(tmp_path):
    writer_store(tmp_path / "s").close()
    proc = subprocess.run([sys.executable, "-c", KILL_IN_EDIT, str(tmp_path / "s")], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(MAIN)), timeout=120)
    assert proc.returncode == 3, proc.stderr
    before = lz.verify(tmp_path / "s", progress=False)
    assert not before.damaged and list(before.unverifiable) == ["x"], before
    lz.open_dataset(tmp_path / "s", mode="r+").close()
    assert_hashes_are_the_rows(tmp_path / "s")
    after = lz.verify(tmp_path / "s", progress=False)
    assert after.ok, after
    x = lz.open_dataset(tmp_path / "s").episode(2)["x"]
    assert (np.asarray(x) == 5.0).all()


# ------------------------------------------------------------------------------------------------ damage
def _flip(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x10]))


def _where(root: Path, e: int, name: str) -> tuple[Path, int, int]:
    state = read_state(root)
    spec = state.arrays[name]
    pack, offset = int(state.table.chunk[e]), int(state.table.offset[e])
    return Path(chunk_path(root, name, pack, spec.ndim)), offset * spec.frame_bytes, spec.frame_bytes


def flip_raw(root: Path) -> dict:
    path, at, fb = _where(root, 3, "action")
    _flip(path, at + fb + 2)
    return {"action": [3]}


def zero_rows(root: Path) -> dict:
    path, at, fb = _where(root, 4, IMG)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes(2 * fb))
    return {IMG: [4]}


def punch_hole(root: Path) -> dict:
    import ctypes

    path, at, fb = _where(root, 1, IMG)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDWR)
    try:
        start = -(-at // 4096) * 4096
        if libc.fallocate(fd, 3, ctypes.c_long(start), ctypes.c_long(4096)) != 0:
            pytest.skip(f"this filesystem cannot punch holes ({os.strerror(ctypes.get_errno())})")
    finally:
        os.close(fd)
    state = read_state(root)
    spec = state.arrays[IMG]
    hit = [e for e in range(6) if int(state.table.chunk[e]) == int(state.table.chunk[1])
           and int(state.table.offset[e]) * spec.frame_bytes < start + 4096
           and (int(state.table.offset[e]) + int(state.table.length[e])) * spec.frame_bytes > start]
    return {IMG: hit}


def truncate_pack(root: Path) -> dict:
    path, _, _ = _where(root, 0, "observation.state")
    os.truncate(path, os.path.getsize(path) - 1)
    state = read_state(root)
    return {"observation.state": [e for e in range(6) if state.table.chunk[e] == state.table.chunk[0]]}


def swap_compact_rows(root: Path) -> dict:
    """Two rows of a compact pack's index swapped and its crc32c made to match: only the hash can tell."""
    state = read_state(root)
    e = 2
    pack, offset = int(state.table.chunk[e]), int(state.table.offset[e])
    rows = int(state.packs.rows[pack])
    path = Path(chunk_path(root, IMG, pack, 4))
    data = bytearray(path.read_bytes())
    index = np.frombuffer(bytes(data[:16 * rows]), "<u8").reshape(rows, 2).copy()
    index[[offset, offset + 1]] = index[[offset + 1, offset]]
    data[:16 * rows] = index.tobytes()
    data[16 * rows:16 * rows + 4] = google_crc32c.value(index.tobytes()).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return {IMG: [2]}


def claim_unfetched(root: Path) -> dict:
    """A root edited to say episodes never fetched are present: unverifiable (no hash), never intact."""
    doc = json.loads((root / "zarr.json").read_bytes())
    attrs = doc["attributes"]["lerobot_zarr"]
    for f in attrs["features"].values():
        f["episodes"] = [[0, 6]]
    (root / "zarr.json").write_text(json.dumps(doc))
    return {}


DAMAGE = {"flip a byte of a raw pack": (flip_raw, {}), "zero two rows": (zero_rows, {}),
          "punch a hole": (punch_hole, {}), "truncate a pack": (truncate_pack, {}),
          "swap two compact index rows": (swap_compact_rows, {"storage": {IMG: "lossless"}}),
          "claim unfetched episodes": (claim_unfetched, {"episodes": [0, 1, 2]})}


@pytest.mark.parametrize("damage", DAMAGE)
def test_verify_names_exactly_what_was_damaged(source, tmp_path, damage):
    fn, kwargs = DAMAGE[damage]
    root = store_of(source, tmp_path / "s", **kwargs)
    assert lz.verify(root, progress=False).ok
    want = fn(root)
    report = lz.verify(root, progress=False)
    assert not report.ok
    assert {k: sorted(v) for k, v in report.damaged.items()} == want, report
    if damage == "claim unfetched episodes":
        assert set(report.unverifiable) == set(read_state(root).arrays)
        assert all(sorted(per) == [3, 4, 5] for per in report.unverifiable.values()), report
        assert "no content hash" in report.unverifiable["action"][3]
    else:
        assert not report.unverifiable, report
        assert all(f"damaged: {name!r} in {len(eps)} episode(s) {eps}" in report.summary() for name, eps in want.items())


def test_damaged_mp4_file_and_mp4_json(video_source, tmp_path):
    root = store_of(video_source, tmp_path / "s", storage={CAM: "mp4"})
    index = json.loads((root / CAM / "mp4.json").read_bytes())
    file = root / CAM / "videos" / index["files"][index["file"][0]]
    data = file.read_bytes()
    file.unlink()  # a hard link to the source folder's file: damage a copy
    file.write_bytes(data)
    _flip(file, os.path.getsize(file) // 2)
    report = lz.verify(root, progress=False)
    same_file = [e for e in range(4) if index["file"][e] == index["file"][0]]
    assert {k: sorted(v) for k, v in report.damaged.items()} == {CAM: same_file}, report
    index["from_timestamp"][1] += 1 / 30
    (root / CAM / "mp4.json").write_text(json.dumps(index))
    report = lz.verify(root, progress=False)
    assert any("mp4.json" in p and "hash" in p for p in report.store_problems), report


@pytest.mark.parametrize("edit", ["task", "fps", "stats", "shift"])
def test_a_root_edited_where_it_still_parses_is_a_store_problem(source, tmp_path, edit):
    root = store_of(source, tmp_path / "s")
    doc = json.loads((root / "zarr.json").read_bytes())
    attrs = doc["attributes"]["lerobot_zarr"]
    if edit == "task":
        attrs["tasks"][0] = "place the cube"
    elif edit == "fps":
        attrs["info"]["fps"] = 15
    elif edit == "stats":
        attrs["stats"]["action"]["mean"][0] += 1.0
    else:
        attrs["episodes"]["index_shift"] = attrs["episodes"]["episode_index_shift"]  # the same column: zeros
        attrs["features"]["action"]["episodes"] = [[0, 5]]
    (root / "zarr.json").write_text(json.dumps(doc))
    report = lz.verify(root, progress=False)
    assert any("zarr.json: its content differs" in p for p in report.store_problems), report
    assert not report.ok
    # nothing commits on top of it (a commit would record the damage as the root's new hash)
    for fix in ({"repair": True}, {"record": True}):
        fixed = lz.verify(root, progress=False, **fix)
        assert any("nothing is committed on top of it" in r for r in fixed.not_repaired), fixed
    with pytest.raises(CorruptStoreError, match="nothing is committed on top of it"):
        with lz.open_dataset(root, root=root, mode="r+") as w:
            w.delete_episodes([0])
    assert any("zarr.json: its content differs" in p for p in lz.verify(root, progress=False).store_problems)


def test_symlinks_and_stale_frame_live_are_store_problems_that_repair_fixes(source, tmp_path):
    root = store_of(source, tmp_path / "s")
    (root / "planted").symlink_to(tmp_path)
    live = root / "frame_live" / "c" / "0"
    live.write_bytes(bytes(len(live.read_bytes())))
    report = lz.verify(root, progress=False)
    assert any("symbolic link" in p for p in report.store_problems)
    assert any("frame_live" in p for p in report.store_problems)
    assert not report.damaged, "lerobot_zarr's own reads do not depend on frame_live"
    fixed = lz.verify(root, repair=True, progress=False)
    assert len(fixed.repaired) == 2 and not fixed.not_repaired, fixed
    assert not (root / "planted").is_symlink() and tmp_path.is_dir()
    assert lz.verify(root, progress=False).ok


# ------------------------------------------------------------------------------------------------ repair
def test_repair_fetches_damaged_episodes_again_from_the_source_folder(source, tmp_path):
    root = store_of(source, tmp_path / "s", storage={IMG: "lossless"})
    ds = lz.open_dataset(root)
    want = ds.get_batch(np.arange(len(ds)))
    flip_raw(root)
    truncate_pack(root)
    swap_compact_rows(root)
    before = lz.verify(root, progress=False)
    assert set(before.damaged) == {"action", "observation.state", IMG}
    report = lz.verify(root, repair=True, progress=False)
    assert report.ok and report.repaired and not report.not_repaired, report
    assert not any("other bytes" in note for note in report.notes), "the folder gives the bytes first recorded"
    again = lz.open_dataset(root)
    got = again.get_batch(np.arange(len(again)))
    for k, v in want.items():
        assert np.array_equal(np.asarray(got[k]), np.asarray(v)) if k != "task" else got[k] == v, k
    assert lz.verify(root, progress=False).ok


def test_repair_fetches_damaged_episodes_again_from_the_hub(source, tmp_path, monkeypatch):
    from hub_fixtures import make_env

    from lerobot_zarr.testing.hub_server import HubServer

    with HubServer(tmp_path / "hub") as server:
        server.add_repo("org/data", source, tags=["v3.0"])
        env = make_env(monkeypatch, tmp_path, server.endpoint)
        ds = lz.open_dataset("org/data", episodes=[1, 3, 4], progress=False)
        want = ds.get_batch(np.arange(len(ds)))
        root = Path(ds.root)
        flip_raw(root)
        report = lz.verify(root, progress=False)
        assert {k: sorted(v) for k, v in report.damaged.items()} == {"action": [3]}
        fixed = lz.verify(root, repair=True, progress=False)
        assert fixed.ok and "Hub repo org/data" in " ".join(fixed.repaired), fixed
        again = lz.open_dataset("org/data", episodes=[1, 3, 4], progress=False)
        np.testing.assert_array_equal(again.get_batch(np.arange(len(again)))["action"], want["action"])
        assert read_state(root).complete_episodes().tolist() == [False, True, False, True, True, False]
        del env


def _rewrite_actions(src: Path) -> None:
    """The folder's first data file written again with other actions (what re-recording a dataset does)."""
    path = sorted((src / "data").glob("*/*.parquet"))[0]
    table = pq.read_table(path)
    actions = [[v + 1.0 for v in row] for row in table.column("action").to_pylist()]
    table = table.set_column(table.schema.get_field_index("action"), table.schema.field("action"),
                             pa.array(actions, type=table.schema.field("action").type))
    pq.write_table(table, path)


@pytest.mark.parametrize("what", ["gone", "changed"])
def test_repair_leaves_the_damage_in_place_when_the_source_folder_is_gone_or_changed(source, tmp_path, what):
    """One flipped byte in one feature: the repair checks the source first and, unable to get the episode back as
    it was recorded, drops nothing; the episode is still served and still reported damaged."""
    src = Path(shutil.copytree(source, tmp_path / "src"))
    root = store_of(src, tmp_path / "s")
    flip_raw(root)
    if what == "gone":
        shutil.rmtree(src)
    else:
        _rewrite_actions(src)
    generation = read_state(root).generation
    report = lz.verify(root, repair=True, progress=False)
    assert not report.ok and {k: sorted(v) for k, v in report.damaged.items()} == {"action": [3]}, report
    why = " ".join(report.not_repaired)
    assert "episodes [3]: left as they are, damaged" in why, why
    assert ("not available" if what == "gone" else "its files changed since") in why, why
    assert read_state(root).generation == generation, "nothing was committed"
    assert lz.open_dataset(root).num_episodes == 6, "every episode is still served"
    again = lz.verify(root, progress=False)
    assert {k: sorted(v) for k, v in again.damaged.items()} == {"action": [3]} and "DAMAGED" in again.summary()


def test_repair_leaves_the_damage_in_place_when_the_hub_is_unreachable(source, tmp_path, monkeypatch):
    from hub_fixtures import make_env

    import lerobot_zarr.hub.http as hub_http
    from lerobot_zarr.testing.hub_server import HubServer

    monkeypatch.setattr(hub_http, "_BACKOFF_S", 0.01)
    with HubServer(tmp_path / "hub") as server:
        server.add_repo("org/data", source, tags=["v3.0"])
        make_env(monkeypatch, tmp_path, server.endpoint)
        root = Path(lz.open_dataset("org/data", episodes=[1, 3, 4], progress=False).root)
    flip_raw(root)  # the server is gone now
    report = lz.verify(root, repair=True, progress=False)
    assert {k: sorted(v) for k, v in report.damaged.items()} == {"action": [3]}, report
    assert "Hub repo org/data" in report.not_repaired[0] and "left as they are" in report.not_repaired[0]
    assert read_state(root).complete_episodes().tolist() == [False, True, False, True, True, False]


def test_verify_reports_episodes_committed_once_and_now_missing(source, tmp_path):
    """What an earlier repair left when its fetch failed: an episode committed once, listed as not fetched."""
    from lerobot_zarr.store import commit

    root = store_of(source, tmp_path / "s")
    state = read_state(root)
    commit(state.without_materialized({"action": [2]}), previous=state)
    assert lz.open_dataset(root).num_episodes == 5
    report = lz.verify(root, progress=False)
    assert not report.ok and {k: sorted(v) for k, v in report.damaged.items()} == {"action": [2]}, report
    assert "no longer in the store" in report.damaged["action"][2] and "DAMAGED" in report.summary()
    assert lz.verify(root, repair=True, progress=False).ok
    assert lz.open_dataset(root).num_episodes == 6
    partial = store_of(source, tmp_path / "partial", episodes=[0, 4])  # never fetched: not missing
    assert lz.verify(partial, progress=False).ok


def test_a_repair_cut_short_after_its_checks_leaves_episodes_verify_reports(source, tmp_path, monkeypatch):
    """A repair whose fetch fails after the source was checked (the network drops) leaves the episode listed as not
    fetched: verify says so (never "intact"), and the next repair fetches it."""
    import lerobot_zarr.writing.integrity as integrity

    root = store_of(source, tmp_path / "s")
    want = lz.open_dataset(root).get_batch(np.arange(len(lz.open_dataset(root))))["action"]
    flip_raw(root)

    def cut_short(*args, **kwargs):
        raise lz.HubError("the connection dropped")

    monkeypatch.setattr(integrity, "transcode", cut_short)
    report = lz.verify(root, repair=True, progress=False)
    assert "could not be fetched again" in report.not_repaired[0], report
    assert lz.open_dataset(root).num_episodes == 5
    after = lz.verify(root, progress=False)
    assert not after.ok and {k: sorted(v) for k, v in after.damaged.items()} == {"action": [3]}, after
    assert "no longer in the store" in after.damaged["action"][3]
    monkeypatch.undo()
    fixed = lz.verify(root, repair=True, progress=False)
    assert fixed.ok, fixed
    ds = lz.open_dataset(root)
    np.testing.assert_array_equal(ds.get_batch(np.arange(len(ds)))["action"], want)


def test_repair_of_a_recorded_store_says_it_is_the_only_copy(tmp_path):
    ds = writer_store(tmp_path / "s")
    ds.close()
    path, at, fb = _where(ds.root, 2, "x")
    _flip(path, at)
    report = lz.verify(ds.root, repair=True, progress=False)
    assert report.damaged == {"x": {2: report.damaged["x"][2]}}
    assert "only copy" in report.not_repaired[0]
    with pytest.raises(CorruptStoreError, match="episode 2.*differ from the content hash"):
        lz.open_dataset(ds.root, mode="r+").delete_frames(2, slice(0, 1))


def test_repair_waits_for_no_writer(tmp_path):
    ds = writer_store(tmp_path / "s")
    path, at, fb = _where(ds.root, 2, "x")
    _flip(path, at)
    report = lz.verify(ds.root, repair=True, progress=False)
    assert report.damaged and "another writer" in report.not_repaired[0], report
    ds.close()


# ------------------------------------------------------------------------------------------------ old stores
def strip_hashes(root: Path) -> None:
    doc = json.loads((root / "zarr.json").read_bytes())
    del doc["attributes"]["lerobot_zarr"]["hashes"]
    (root / "zarr.json").write_text(json.dumps(doc))


def test_a_store_made_before_hashes_is_unverifiable_until_record(source, tmp_path):
    root = store_of(source, tmp_path / "s")
    strip_hashes(root)
    report = lz.verify(root, progress=False)
    assert not report.ok and not report.damaged and report.checked == 0
    assert set(report.unverifiable) == set(read_state(root).arrays)
    recorded = lz.verify(root, record=True, progress=False)
    assert recorded.ok and recorded.repaired, recorded
    assert lz.verify(root, progress=False).ok
    flip_raw(root)
    assert lz.verify(root, progress=False).damaged.keys() == {"action"}


def test_appends_to_an_old_store_are_hashed(tmp_path):
    ds = writer_store(tmp_path / "s")
    ds.close()
    strip_hashes(ds.root)
    with lz.open_dataset(ds.root, mode="r+") as w:
        w.add_episode({"x": np.ones((4, 3), np.float32), "cam": np.zeros((4, 6, 8, 3), np.uint8)}, task="t")
    report = lz.verify(ds.root, progress=False)
    assert all(sorted(per) == list(range(6)) for per in report.unverifiable.values()), report
    assert report.checked == len(read_state(ds.root).arrays)  # the new episode, every feature


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_verify(source, tmp_path, capsys):
    root = store_of(source, tmp_path / "s")
    assert cli(["verify", str(root)]) == 0
    assert "intact" in capsys.readouterr().out
    flip_raw(root)
    assert cli(["verify", str(root), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and list(out["damaged"]) == ["action"] and list(out["damaged"]["action"]) == ["3"]
    assert cli(["verify", str(root), "--repair"]) == 0
    assert "fetched episodes [3] again" in capsys.readouterr().out
    strip_hashes(root)
    assert cli(["verify", str(root)]) == 3
    assert cli(["verify", str(tmp_path / "nothing")]) == 1
    assert "not a lerobot_zarr store" in capsys.readouterr().err


def test_verify_reads_at_least_as_many_bytes_as_the_rows(source, tmp_path):
    root = store_of(source, tmp_path / "s")
    state = read_state(root)
    rows = sum(int(state.table.length.sum()) * spec.frame_bytes for spec in state.arrays.values())
    assert lz.verify(root, progress=False).bytes_read == rows


@pytest.mark.parametrize("version", [1, 2])
def test_a_legacy_store_verifies_as_unverifiable_then_record_makes_damage_visible(tmp_path, version, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "store"))  # importable run alone too
    from test_packs import write_legacy_store

    src = write_sample_dataset(tmp_path / "src", n_episodes=5, lengths=(20, 30), state_dim=4, action_dim=4,
                               episodes_per_file=5)
    write_legacy_store(tmp_path / "s", src, version, retired=(1,) if version == 2 else ())
    report = lz.verify(tmp_path / "s", progress=False)
    assert not report.damaged and report.unverifiable and report.checked == 0, report
    assert any("no content hash" in n for n in report.notes)
    assert lz.verify(tmp_path / "s", record=True, progress=False).repaired
    assert lz.verify(tmp_path / "s", progress=False).ok
    state = read_state(tmp_path / "s")
    path, at, fb = _where(tmp_path / "s", 2, "action")
    _flip(path, at)
    assert {k: list(v) for k, v in lz.verify(tmp_path / "s", progress=False).damaged.items()} == {"action": [2]}
    assert state.read_version == 3, "the recording commit upgraded the store to format 3"


def test_repair_fetches_a_damaged_mp4_file_again(video_source, tmp_path):
    root = store_of(video_source, tmp_path / "s", storage={CAM: "mp4"})
    want = lz.open_dataset(root).get_batch(np.arange(10))[CAM]
    index = json.loads((root / CAM / "mp4.json").read_bytes())
    file = root / CAM / "videos" / index["files"][index["file"][3]]
    data = file.read_bytes()
    file.unlink()  # the store's file is a hard link to the source folder's: damage a copy of it
    file.write_bytes(data[:-100])
    assert lz.verify(root, progress=False).damaged
    report = lz.verify(root, repair=True, progress=False)
    assert report.ok, report
    np.testing.assert_array_equal(lz.open_dataset(root).get_batch(np.arange(10))[CAM], want)


def test_compaction_moves_a_damaged_episode_with_its_hash_and_says_so(tmp_path):
    ds = writer_store(tmp_path / "s")  # packs of 40 rows: episodes 0-4 (35 frames) in pack 0
    state = read_state(ds.root)
    assert state.table.chunk[0] == state.table.chunk[1] == state.table.chunk[4] != state.table.chunk[5]
    path, at, fb = _where(ds.root, 1, "x")
    _flip(path, at + 1)
    with pytest.warns(lz.LeRobotZarrWarning, match="episode 0.*differ from the content hash"):
        ds.delete_episodes([0, 2, 3])  # pack 0 left mostly dead: its other episodes move to fresh rows
    assert int(read_state(ds.root).table.chunk[0]) != int(state.table.chunk[1]), "the episode was not moved"
    report = ds.verify(progress=False)
    assert {k: list(v) for k, v in report.damaged.items()} == {"x": [0]}, report
    ds.close()


def test_unreadable_hash_columns_are_reported_and_recorded_anew(tmp_path):
    ds = writer_store(tmp_path / "s")
    ds.close()
    doc = json.loads((ds.root / "zarr.json").read_bytes())
    doc["attributes"]["lerobot_zarr"]["hashes"]["features"]["x"]["crc32c"] = "AAAA"
    (ds.root / "zarr.json").write_text(json.dumps(doc))
    r = lz.open_dataset(ds.root)  # sampling never reads the hashes
    assert len(r.get_batch(np.arange(len(r)))["x"]) == len(r)
    report = lz.verify(ds.root, progress=False)
    assert any("content hashes cannot be read" in p for p in report.store_problems) and not report.damaged
    with pytest.warns(lz.LeRobotZarrWarning, match="content hashes cannot be read"):
        w = lz.open_dataset(ds.root, mode="r+")
    w.add_episode({"x": np.ones((3, 3), np.float32), "cam": np.zeros((3, 6, 8, 3), np.uint8)}, task="t")
    w.close()
    assert lz.verify(ds.root, record=True, progress=False).repaired
    assert lz.verify(ds.root, progress=False).ok
