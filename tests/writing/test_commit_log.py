"""The commit log (issue 32): an RL buffer's episode commits are records appended to ``.commit-log``, folded into the
root every few dozen commits, at ``checkpoint()``, ``close()`` and when a writer opens the store.

Checked against the reference transitions (``rl_reference``): a record cut short at any byte (a writer killed while
appending) or damaged is not read and the store reads at the commit before it; a log left behind by a fold that was
killed before removing it changes nothing; readers (``read_state``, a dataset, a ``mode="r"`` buffer) see the
logged commits; an older lerobot_zarr refuses the store while it holds a log; ``verify`` checks the logged episodes
against the hashes their records carry."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from rl_reference import check_batch, transitions

import lerobot_zarr
import lerobot_zarr.store.state as state_module
from lerobot_zarr import UnsupportedStoreError
from lerobot_zarr.store.log import LOG_FILE
from lerobot_zarr.store.state import read_state
from lerobot_zarr.writing.transitions import TransitionBuffer

SEED = 7


def add(buf: TransitionBuffer, episodes) -> None:
    for e in episodes:
        for tr in transitions(SEED, e):
            buf.add(**tr)


def held(root: Path) -> list[tuple[int, int]]:
    """(episode_index, length) of every episode a fresh reader sees (root + log)."""
    table = read_state(root).table
    return list(zip((np.arange(len(table)) + table.episode_index_shift).tolist(), table.length.tolist(), strict=True))


def episodes_of(buf: TransitionBuffer) -> list[int]:
    """The reference episodes a buffer holds, every transition checked against the reference."""
    return sorted({e for e, _ in check_batch(buf.gather(np.arange(len(buf))), SEED)})


def logged_buffer(tmp_path: Path, n: int, **kwargs) -> tuple[TransitionBuffer, list]:
    """A buffer whose ``n`` episodes are all in the log (its root, format 4, was written before the first), and
    what a reader saw after each commit."""
    buf = TransitionBuffer(tmp_path / "buf", **kwargs)
    seen = []
    for e in range(n):
        add(buf, [e])
        seen.append(held(buf.root))
    assert len(read_state(buf.root).log_records) == n
    return buf, seen


def test_readers_see_the_logged_commits_and_an_older_version_refuses_the_store(tmp_path, monkeypatch):
    buf, seen = logged_buffer(tmp_path, 6)
    root = buf.root
    assert len(read_state(root, log=False).table) == 0, "the root holds no episode"
    assert [len(s) for s in seen] == [1, 2, 3, 4, 5, 6]
    ds = lerobot_zarr.open_dataset(root)
    assert ds.meta.total_episodes == 6 and len(ds) == sum(length for _, length in seen[-1])
    reader = TransitionBuffer(root, mode="r", refresh_interval=None)
    assert len(reader) == len(buf)
    add(buf, [6])
    assert reader.refresh() and len(reader) == len(buf) and ds.refresh() and ds.meta.total_episodes == 7
    monkeypatch.setattr(state_module, "_READABLE_VERSIONS", (1, 2, 3))  # a lerobot_zarr from before the log
    with pytest.raises(UnsupportedStoreError, match="format version 4"):
        read_state(root)
    monkeypatch.undo()
    reader.close()
    ds.close()
    buf.close()  # the log folded into a format-3 root: older versions read it again
    assert not (root / LOG_FILE).exists()
    monkeypatch.setattr(state_module, "_READABLE_VERSIONS", (1, 2, 3))
    assert held(root) == seen[-1] + [(6, held(root)[-1][1])]


def test_a_record_cut_short_at_any_byte_or_damaged_is_not_read_and_the_next_writer_goes_on(tmp_path):
    buf, seen = logged_buffer(tmp_path, 4)
    buf._writer._release()  # the writer killed: no fold
    root = buf.root
    log = (root / LOG_FILE).read_bytes()
    starts, at = [], 0
    while at < len(log):  # each record: magic, length, crc32c, payload
        starts.append(at)
        at += 12 + struct.unpack_from("<I", log, at + 4)[0]
    assert at == len(log) and len(starts) == 4
    start = starts[-1]
    for cut in range(start, len(log)):
        (root / LOG_FILE).write_bytes(log[:cut])
        assert held(root) == seen[-2], f"cut at byte {cut} of {len(log)}"
    for flip in (start + 5, start + 12, len(log) - 1):  # its length, its payload, its last byte
        damaged = bytearray(log)
        damaged[flip] ^= 0x40
        (root / LOG_FILE).write_bytes(bytes(damaged))
        assert held(root) == seen[-2], f"byte {flip} flipped"
    (root / LOG_FILE).write_bytes(log[:len(log) - 3])
    report = lerobot_zarr.verify(root, progress=False)  # (frame_live flagged the rows before the record)
    assert not report.damaged and not report.unverifiable and any("not a whole record" in n for n in report.notes)
    assert all("frame_live" in p for p in report.store_problems), report
    again = TransitionBuffer(root)  # opening folds the valid records into the root
    assert held(root) == seen[-2] and not (root / LOG_FILE).exists()
    add(again, [10, 11])
    assert episodes_of(again) == [0, 1, 2, 10, 11]
    again.close()
    assert lerobot_zarr.verify(root, progress=False).ok


def test_a_log_left_by_a_fold_killed_before_removing_it_changes_nothing(tmp_path):
    buf, seen = logged_buffer(tmp_path, 4)
    root = buf.root
    stale = (root / LOG_FILE).read_bytes()
    buf.checkpoint()  # the fold: a format-4 root holding every commit, then the log removed
    assert not (root / LOG_FILE).exists() and read_state(root).logged
    (root / LOG_FILE).write_bytes(stale)  # as if killed between the root's rename and the removal
    assert held(root) == seen[-1]
    add(buf, [4])  # the writer appends after what it knows of the log: the stale records stay below the root
    assert len(held(root)) == 5 and episodes_of(buf) == [0, 1, 2, 3, 4]
    buf._writer._release()
    again = TransitionBuffer(root)
    assert episodes_of(again) == [0, 1, 2, 3, 4]
    again.close()
    assert lerobot_zarr.verify(root, progress=False).ok


def test_verify_checks_logged_episodes_against_their_records(tmp_path):
    buf, _ = logged_buffer(tmp_path, 4)
    root = buf.root
    report = lerobot_zarr.verify(root, progress=False)
    assert report.ok and any("commit log" in n for n in report.notes), report
    table = read_state(root).table
    pack, offset = int(table.chunk[3]), int(table.offset[3])  # an episode only the log lists
    path = next((root / "action" / "c" / str(pack)).rglob("0"))
    spec = read_state(root).arrays["action"]
    with open(path, "r+b") as f:
        f.seek(offset * spec.frame_bytes)
        f.write(b"\xff" * 4)
    report = lerobot_zarr.verify(root, progress=False)
    assert list(report.damaged.get("action", {})) == [3], report
    buf._writer._release()


def test_a_ring_buffer_evicts_through_the_log(tmp_path):
    buf, seen = logged_buffer(tmp_path, 12, capacity=20)
    assert seen[-1][0][0] > 0, "the test means to evict"
    assert held(buf.root) == seen[-1] and len(buf) <= 20
    copy = tmp_path / "copy"
    shutil.copytree(buf.root, copy, ignore=shutil.ignore_patterns(".lock"))
    buf.close()
    assert held(buf.root) == seen[-1] == held(copy)
    assert lerobot_zarr.verify(buf.root, progress=False).ok and lerobot_zarr.verify(copy, progress=False).ok
