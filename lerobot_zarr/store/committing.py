"""Writing a store's root state: creating a store, THE commit (zarr's copies of the metadata, ``frame_live``, the
atomic replacement of the root ``zarr.json``), a commit appended to the log instead, and repairing ``frame_live``
(see the contract in :mod:`lerobot_zarr.store`)."""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..errors import CorruptStoreError, StoreExistsError, UnsupportedStoreError
from ..utils.fileio import (
    atomic_write,
    check_in_store,
    create_sized,
    data_ranges,
    disk_error,
    flush_filesystem,
    open_nofollow,
    pwrite_all,
    replace_file,
    write_in_place,
)
from .hashes import root_hash
from .log import append_record, remove_log
from .state import (
    ATTRS_KEY,
    CREATING_MARKER,
    FORMAT_VERSION,
    LIVE_PENDING_MARKER,
    StoreState,
    check_array_name,
    live_path,
)
from .tables import PackLayout, location_key
from .zarr_meta import ROOT, dump, metadata_documents

__all__ = ["check_new_store_location", "remove_creation_debris", "create_store", "commit", "append_commit",
           "repair_live", "live_runs", "live_matches"]


def check_new_store_location(root: Path) -> None:
    """Refuse to make a store in a file, over a store, or in a folder holding anything but a half-created store."""
    if root.exists() and (root.is_symlink() or not root.is_dir()):
        raise StoreExistsError(f"{root}: exists and is not a folder; a store needs a folder of its own", path=root)
    if (root / ROOT).is_file():
        raise StoreExistsError(f"{root}: is a store already (open it, e.g. open_dataset(root, mode='r+'), or choose "
                               f"another folder)", path=root)
    if root.is_dir() and not (root / CREATING_MARKER).exists():
        if any(p.name != ".lock" for p in root.iterdir()):
            raise StoreExistsError(f"{root}: folder is not empty and is not a lerobot_zarr store; refusing to write "
                                   f"into it", path=root)


def remove_creation_debris(root: Path) -> None:
    """Mark ``root`` as a store being created and empty it of an earlier creation that never committed."""
    root.mkdir(parents=True, exist_ok=True)
    leftovers = [p for p in root.iterdir() if p.name not in (".lock", CREATING_MARKER)]
    (root / CREATING_MARKER).touch()
    for p in leftovers:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def create_store(state: StoreState, *, keep_files: bool = False) -> StoreState:
    """Lay out a store at ``state.root`` and make its first commit. The folder must be empty or a half-created
    store (one killed before its first commit), whose debris is removed unless ``keep_files`` (the caller put the
    pack files its state lists there first, as a copy does). The table may list episodes to come (a transcode
    lists its source's, with their planned packs)."""
    root = state.root
    check_new_store_location(root)
    for name in state.arrays:
        check_array_name(name)
    folded = [name.casefold() for name in state.arrays]
    if len(set(folded)) != len(folded):
        raise UnsupportedStoreError(f"{root}: feature names {sorted(state.arrays)} differ only by case; they would "
                                    f"share a folder on case-insensitive filesystems", path=root)
    if keep_files:
        (root / CREATING_MARKER).touch()
    else:
        remove_creation_debris(root)
    state = commit(replace(state, generation=-1, read_version=FORMAT_VERSION), previous=None)
    (root / CREATING_MARKER).unlink()
    return state


def _write_zarr_copies(state: StoreState, docs: dict[str, dict], previous: StoreState | None) -> dict[str, bytes]:
    """What zarr readers without consolidated metadata read: each array's ``zarr.json`` (``docs``) and the episode
    table arrays; returns them (path in the store -> bytes). Not the commit point: our readers never read them, and
    a commit writes them first, in place (renaming 16 files per commit cost more than the rest of it on a busy
    disk; a crash between them and the root leaves them ahead of it either way: ``verify`` names stale ones,
    ``--repair`` and the next commit rewrite them), only those that differ from what this process's commit of
    ``previous`` wrote (compared with the files when it was read from disk)."""
    root, table = state.root, state.table
    columns = {"episode_start": table.start, "episode_end": table.end, "episode_length": table.length,
               "episode_task_index": table.task_index, "episode_chunk": table.chunk, "episode_offset": table.offset,
               "episode_frame": state.episode_frame()}
    unknown = state.unresolved_mask()
    if unknown.any():  # placeholders: not known (-1) but for the pack
        columns = {name: np.where(unknown, -1, values) if name != "episode_chunk" else values
                   for name, values in columns.items()}
    copies = {f"{name}/c/0": np.asarray(values, dtype="<i8").tobytes() for name, values in columns.items()}
    copies.update((key, dump(doc)) for key, doc in docs.items())
    known = previous.zarr_copies if previous is not None and previous.zarr_copies is not None else {}
    for key, data in copies.items():
        if known.get(key) != data:
            write_in_place(root / key, data, root=root, pad=key.endswith(ROOT), unless_equal=key not in known)
    return copies


def _make_folder(root: Path, folder: Path) -> None:
    """``folder`` inside the store made (with its parents) after checking no existing one is a link."""
    check_in_store(root, folder / "_")
    folder.mkdir(parents=True, exist_ok=True)


def _live_runs(state: StoreState) -> np.ndarray:
    """(pack, offset, length) of every row run that is live in ``state``: its complete episodes."""
    t = state.table
    done = state.complete_episodes()
    return np.stack([t.chunk[done], t.offset[done], t.length[done]], axis=1) if len(t) else np.zeros((0, 3), np.int64)


def _set_live(root: Path, packs: PackLayout, runs: np.ndarray, value: bool) -> None:
    for pack, offset, length in runs.tolist():
        rows = int(packs.rows[pack])
        if not rows:
            continue
        path = live_path(root, pack)
        create_sized(path, rows, root=root)
        fd = open_nofollow(path, os.O_WRONLY, root=root)
        try:
            _write_flags(fd, offset, length, value, path)
        finally:
            os.close(fd)


_FLAG_BLOCK = 8 << 20  # frame_live bytes written or compared at a time: a huge declared pack allocates nothing


def _write_flags(fd: int, offset: int, length: int, value: bool, path: str) -> None:
    block = (b"\1" if value else b"\0") * min(length, _FLAG_BLOCK)
    for at in range(offset, offset + length, _FLAG_BLOCK):
        pwrite_all(fd, block[:min(_FLAG_BLOCK, offset + length - at)], at, path)


def _runs_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows of ``a`` (pack, offset, length) that ``b`` does not hold (a run of ``b`` at the same place holds the
    first rows of a longer one: an episode extended in place)."""
    if not len(a) or not len(b):
        return a
    kb = location_key(b[:, 0], b[:, 1])
    ka = location_key(a[:, 0], a[:, 1])
    order = np.argsort(kb)
    position = np.minimum(np.searchsorted(kb[order], ka), len(b) - 1)
    held = np.where(kb[order][position] == ka, b[order[position], 2], 0)
    rest = a.copy()
    rest[:, 1] += held
    rest[:, 2] -= held
    return rest[rest[:, 2] > 0]


def repair_live(state: StoreState) -> None:
    """Rewrite every pack's ``frame_live`` that differs from the table (after a crash between a commit and its
    flags, or damage); the table is what lerobot_zarr reads, ``frame_live`` is for zarr and xarray readers."""
    for pack, runs in live_runs(state).items():
        rows = int(state.packs.rows[pack])
        if live_matches(state.root, pack, rows, runs):
            continue
        path = Path(live_path(state.root, pack))
        _make_folder(state.root, path.parent)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, root=state.root)
        try:
            os.ftruncate(fd, rows)
            for offset, length in runs:
                _write_flags(fd, offset, length, True, str(path))
        except OSError as exc:
            os.close(fd)
            os.unlink(tmp)
            raise disk_error(exc, path) from None
        os.close(fd)
        replace_file(tmp, path)


def live_runs(state: StoreState) -> dict[int, list[tuple[int, int]]]:
    """What ``frame_live`` must hold: per pack with rows, the ``(offset, length)`` runs of rows of complete
    committed episodes, in order (every other row is 0)."""
    out: dict[int, list[tuple[int, int]]] = {int(k): [] for k in np.flatnonzero(state.packs.rows > 0).tolist()}
    for pack, offset, length in sorted(_live_runs(state).tolist()):
        if pack in out:
            out[pack].append((offset, length))
    return out


def live_matches(root: Path, pack: int, rows: int, runs: list[tuple[int, int]]) -> bool:
    """Whether pack ``pack``'s ``frame_live`` file (``rows`` bytes) is 1 exactly at ``runs`` (a missing file holds
    no live row). Holes of a sparse file are not read."""
    path = live_path(root, pack)
    try:
        fd = open_nofollow(path, os.O_RDONLY, root=root)
    except FileNotFoundError:
        return not runs
    except CorruptStoreError:  # a link on the way
        return False
    try:
        if os.fstat(fd).st_size != rows:
            return False
        ranges = data_ranges(fd, rows)
        covered = 0
        for offset, length in runs:  # live rows must lie in data, never in a hole
            while covered < len(ranges) and ranges[covered][1] <= offset:
                covered += 1
            if covered == len(ranges) or ranges[covered][0] > offset or ranges[covered][1] < offset + length:
                return False
        starts = np.array([r[0] for r in runs], dtype=np.int64)
        ends = np.array([r[0] + r[1] for r in runs], dtype=np.int64)
        for a, b in ranges:
            for at in range(a, b, _FLAG_BLOCK):
                stop = min(b, at + _FLAG_BLOCK)
                want = np.zeros(stop - at, dtype=np.uint8)
                first = int(np.searchsorted(ends, at, side="right"))
                for s, e in zip(starts[first:].tolist(), ends[first:].tolist(), strict=True):
                    if s >= stop:
                        break
                    want[max(s, at) - at:min(e, stop) - at] = 1
                if os.pread(fd, stop - at, at) != want.tobytes():
                    return False
        return True
    finally:
        os.close(fd)


def _check_intact(previous: StoreState | None) -> None:
    if previous is not None and previous.root_intact is not None and not previous.root_intact():
        root = previous.root
        raise CorruptStoreError(f"{root / ROOT}: its content differs from the hash recorded at its commit (damaged "
                                f"since?); nothing is committed on top of it (`lerobot-zarr verify {root}`; restore "
                                f"the store from a copy or make it again from its source)", path=root / ROOT)


def commit(state: StoreState, *, previous: StoreState | None, durable: bool = True) -> StoreState:
    """THE commit: publish ``state`` as the store's new committed state and return it (generation + 1).

    Order: zarr's copies of the metadata, rows becoming live flagged in ``frame_live``, a flush of everything
    written (``durable``: to disk), the atomic replacement of the root ``zarr.json``, then rows no longer live
    unflagged and the log removed (``previous`` was a format-4 root: the new root holds its commits, each of a
    generation below the new one, so a log left by a crash changes nothing). ``previous`` is the state this one
    replaces (None when creating the store)."""
    root = state.root
    _check_intact(previous)
    base = -1 if previous is None else previous.generation
    state = replace(state, generation=base + 1, read_version=FORMAT_VERSION, root_intact=None)
    pending = root / LIVE_PENDING_MARKER
    repair = pending.exists() or previous is None or previous.read_version < FORMAT_VERSION
    new_runs = _live_runs(state)
    old_runs = _live_runs(previous) if previous is not None else np.zeros((0, 3), np.int64)
    gone = _runs_difference(old_runs, new_runs)
    if len(gone) and not pending.exists():
        pending.touch()
    try:
        attrs = state.to_json()
        attrs["hashes"]["root"] = root_hash(attrs)
        docs = metadata_documents(state.arrays, state.packs, len(state.table), {ATTRS_KEY: attrs})
        root_doc = docs.pop(ROOT)
        state = replace(state, zarr_copies=_write_zarr_copies(state, docs, previous))
        if not repair:
            _set_live(root, state.packs, _runs_difference(new_runs, old_runs), True)
        if durable:
            flush_filesystem(root)  # data reaches the disk before the metadata that lists it
        atomic_write(root / ROOT, dump(root_doc), durable=durable)
    except BaseException:
        if previous is not None and previous.zarr_copies is not None:
            previous.zarr_copies.clear()  # the copies may hold this failed commit's: the next one compares files
        raise
    if previous is not None and previous.logged:
        remove_log(root)
    _finish_live(state, gone, repair)
    return state


def _complete(state: StoreState) -> bool:
    """Whether every episode of ``state`` is committed for every array (what a writer's appends leave)."""
    every = ((0, len(state.table)),) if len(state.table) else ()
    return not any(state.unavailable.values()) and all(state.materialized.get(name, ()) == every
                                                       for name in state.arrays)


def _appended_runs(state: StoreState, previous: StoreState, drop: int, extend: bool) -> tuple[np.ndarray, np.ndarray]:
    """(rows becoming live, rows no longer live) of an append: from the episodes it touches alone (the dropped ones,
    the extended one, the new last one), so that its cost does not grow with the store; every episode's runs
    compared when some are incomplete."""
    if not (_complete(state) and _complete(previous)):
        new_runs, old_runs = _live_runs(state), _live_runs(previous)
        return _runs_difference(new_runs, old_runs), _runs_difference(old_runs, new_runs)
    t, p = state.table, previous.table
    new = np.array([[t.chunk[-1], t.offset[-1], t.length[-1]]], dtype=np.int64) if len(t) else \
        np.zeros((0, 3), np.int64)
    touched = np.arange(drop, dtype=np.int64)
    if extend:
        touched = np.append(touched, len(p) - 1)
    old = np.stack([p.chunk[touched], p.offset[touched], p.length[touched]], axis=1)
    return _runs_difference(new, old), _runs_difference(old, new)


def append_commit(state: StoreState, *, previous: StoreState, record: bytes, at: int, drop: int, extend: bool,
                  durable: bool = True) -> StoreState:
    """A commit appended to the log of a format-4 root (``previous.logged``): ``state`` is ``previous`` with
    ``record`` applied (:func:`~lerobot_zarr.store.state.apply_record`: one episode appended, or the last one
    extended, after ``drop`` of the oldest were dropped). Order: rows becoming live flagged in ``frame_live``, a
    flush (``durable``), the record written at byte ``at`` of the log in one write (the commit point: a record cut
    short is not read), then rows no longer live unflagged. zarr's copies and the root are left as they are (zarr
    readers see the root's commit until the log is folded into it)."""
    root = state.root
    _check_intact(previous)
    pending = root / LIVE_PENDING_MARKER
    repair = pending.exists()
    flag, gone = _appended_runs(state, previous, drop, extend)
    if len(gone) and not repair:
        pending.touch()
    if not repair:
        _set_live(root, state.packs, flag, True)
    if durable:
        flush_filesystem(root)  # data reaches the disk before the record that lists it
    append_record(root, record, at, durable=durable)
    _finish_live(state, gone, repair)
    return state


def _finish_live(state: StoreState, gone: np.ndarray, repair: bool) -> None:
    """After a commit point: ``frame_live`` rewritten from the table (``repair``), or the rows no longer live
    unflagged; then the pending marker removed."""
    if repair:
        repair_live(state)
    else:
        _set_live(state.root, state.packs, gone, False)
    with contextlib.suppress(FileNotFoundError):
        (state.root / LIVE_PENDING_MARKER).unlink()
