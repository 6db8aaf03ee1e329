"""A store's writable copy: :func:`fork` makes a new store that shares the source's pack files by hard links until a
writer changes one (it copies a shared pack first)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..doctor.findings import DOCTOR_DIR
from ..errors import NotMaterializedError
from ..store.committing import check_new_store_location, create_store, remove_creation_debris
from ..store.state import StoreState, chunk_path, read_state
from ..utils.fileio import WriterLock, check_in_store, copy_file, link_or_copy

__all__ = ["fork"]


def fork(source: str | os.PathLike, root: str | os.PathLike) -> StoreState:
    """Make ``root`` a copy of the complete store ``source`` that shares its pack files by hard links (instant, no
    disk space) until a writer changes a pack, which it copies first (:meth:`WriteTransaction.own_pack`): writes
    to the copy never reach ``source``. On another filesystem (no hard links) the packs are copied."""
    source, root = Path(source), Path(root)
    state = read_state(source)
    if not state.complete_episodes().all():
        raise NotMaterializedError(f"{source}: a store is copied with every episode; this one lacks some",
                                   path=source)
    with WriterLock(root, blocking=False):
        check_new_store_location(root)
        remove_creation_debris(root)
        for pack in np.flatnonzero(state.packs.rows > 0).tolist():
            for name, spec in state.arrays.items():
                src = check_in_store(source, chunk_path(source, name, pack, spec.ndim))
                dst = Path(check_in_store(root, chunk_path(root, name, pack, spec.ndim)))
                if not os.path.lexists(src):  # a camera no episode of the pack has: no file
                    continue
                dst.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileNotFoundError):
                    dst.unlink()  # debris of a copy killed midway
                link_or_copy(src, dst)
        _copy_store_files(source, root, ".episode_stats", ".json")
        _copy_store_files(source, root, DOCTOR_DIR, ".json", ".ndjson")  # the doctor's report goes with the copy
        new = create_store(replace(state, root=root, retired=()), keep_files=True)
    return new


def _copy_store_files(source: Path, root: Path, name: str, *suffixes: str) -> None:
    """Files of folder ``name`` of ``source`` ending in ``suffixes`` copied into ``root`` (no link followed)."""
    folder = Path(check_in_store(source, source / name / "_")).parent
    if folder.is_symlink() or not folder.is_dir():
        return
    target = root / name
    target.mkdir(exist_ok=True)
    for entry in folder.iterdir():
        if entry.is_file() and not entry.is_symlink() and entry.name.endswith(suffixes):
            with contextlib.suppress(FileExistsError):
                copy_file(entry, target / entry.name)
