"""The doctor's findings kept in a store, so that ``ds.defects`` works on a reopened store and a resumed transcode
keeps what it found in the episodes it had done.

Files (under ``.doctor/`` in the store; not part of the zarr hierarchy, like ``.episode_stats/``)::

    .doctor/findings.ndjson  one JSON line per commit of a transcode (or one per ``ds.doctor()``): the episodes it
                             checked, each with its identity, and their findings. Appended under the writer lock just
                             before the commit that lists them (an episode checked again adds the same findings)
    .doctor/moments.json     the moments of the numeric features over the episodes they cover (for the reductions),
                             kept at the end of a transcode (under the writer lock, replaced whole)
    .doctor/report.json      the last reduction: findings of the dataset as a whole (stats, dead channels, tasks)
                             and duplicate episodes, with the store's generation it was made at

Each episode checked is kept with its identity, the length and content hash of its ``index`` rows
(``"crc-length"``: stored index values are never rewritten, deletions renumber episodes through the table), and a
fingerprint of the content hashes of all its features. In a store a writer changed since (``edited``), an episode
is found again by its identity (those deleted are gone) and its findings hold only while its fingerprint is the
same: an episode edited since was not checked as it is now. Files come from the store, so they are untrusted: read
within bounds, JSON depth-guarded, every field checked.
"""

from __future__ import annotations

import itertools
import json
import operator
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CorruptStoreError
from ..store.state import StoreState, read_state
from ..store.tables import parse_ranges, ranges_of
from ..utils.fileio import atomic_write, check_in_store, load_json, open_nofollow, read_bounded
from .checks import Moments
from .kinds import THRESHOLDS, Defect, frame_ranges, ranges_text
from .report import DoctorReport

__all__ = ["DOCTOR_DIR", "identities", "append_findings", "replace_findings", "load_moments", "save_moments",
           "write_report", "read_report", "has_report", "recorded_findings"]

DOCTOR_DIR = ".doctor"
_EPISODES, _MOMENTS, _REPORT = "findings.ndjson", "moments.json", "report.json"
_MAX_FILE = 512 << 20
VERSION = 1


def _path(root: Path, name: str) -> Path:
    return Path(root) / DOCTOR_DIR / name


_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
                 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9], dtype=np.uint64)


def identities(state: StoreState, episodes: Iterable[int] | None = None,
               fresh: Mapping[int, Mapping[str, int]] | None = None) -> dict[int, tuple[str | None, str]]:
    """Each episode's identity (``"crc-length"`` of its ``index`` rows; None where no hash is recorded) and a
    fingerprint of its features' content hashes (-1 where none; those of ``fresh``, about to be committed, else
    the state's): a 64-bit mix of them in feature order, which any change of one changes."""
    wanted = np.arange(len(state.table)) if episodes is None else np.asarray(list(episodes), dtype=np.int64)
    names = sorted(state.arrays)
    fresh = fresh or {}
    every = operator.itemgetter(*names) if len(names) > 1 else (lambda per: (per[names[0]],)) if names else \
        (lambda per: ())
    unknown = (-2,) * len(names)

    def row(e: int) -> Any:
        per = fresh.get(e)
        try:
            return every(per) if per is not None else unknown
        except KeyError:  # some features were not written now: the state has theirs
            return tuple(per.get(n, -2) for n in names)

    crcs = np.fromiter(itertools.chain.from_iterable(map(row, wanted.tolist())), dtype=np.int64,
                       count=len(wanted) * len(names)).reshape(len(wanted), len(names))
    for j, name in enumerate(names):
        lacking = crcs[:, j] == -2
        if lacking.any():
            crcs[lacking, j] = state.episode_hashes(name)[wanted[lacking]]
    mix = np.resize(_MIX, len(names)) + np.arange(len(names), dtype=np.uint64) * np.uint64(2)
    with np.errstate(over="ignore"):
        fingerprints = (crcs.astype(np.uint64) * mix).sum(axis=1, dtype=np.uint64) if len(names) else \
            np.zeros(len(wanted), np.uint64)
    index = crcs[:, names.index("index")] if "index" in names else np.full(len(wanted), -1)
    lengths = state.table.length[wanted]
    return {int(e): (None if i < 0 else f"{i:08x}-{n}", f"{fp:016x}")
            for e, i, n, fp in zip(wanted.tolist(), index.tolist(), lengths.tolist(), fingerprints.tolist(),
                                   strict=True)}


def append_findings(root: Path, episodes: Mapping[int, tuple[str | None, str]], found: Mapping[int, list[Defect]]
                    ) -> None:
    """Add one line: these episodes (with their identities, see :func:`identities`) were checked and hold
    ``found``. Call it under the store's writer lock."""
    if not episodes:
        return
    line = {"v": VERSION, "episodes": [[int(e), *key] for e, key in sorted(episodes.items())],
            "defects": [d.to_json() for e in sorted(episodes) for d in found.get(e, ())]}
    path = _path(root, _EPISODES)
    check_in_store(root, path)
    path.parent.mkdir(exist_ok=True)
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, root=root)
    try:
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def replace_findings(root: Path, episodes: Mapping[int, tuple[str | None, str]], found: Mapping[int, list[Defect]]
                     ) -> None:
    """Make the findings file hold just this one line (``ds.doctor()``'s full check)."""
    path = _path(root, _EPISODES)
    check_in_store(root, path)
    path.parent.mkdir(exist_ok=True)
    line = {"v": VERSION, "episodes": [[int(e), *key] for e, key in sorted(episodes.items())],
            "defects": [d.to_json() for e in sorted(episodes) for d in found.get(e, ())]}
    atomic_write(path, (json.dumps(line, separators=(",", ":")) + "\n").encode(), durable=False, root=root)


def _read_json(root: Path, name: str) -> Any:
    path = _path(root, name)
    try:
        data = read_bounded(path, _MAX_FILE, root=root, what="doctor file")
    except FileNotFoundError:
        return None
    return load_json(data, str(path))


def load_moments(root: Path, n_episodes: int) -> Moments:
    """The moments a store keeps (none if it keeps none, or unreadable ones: they are recomputed)."""
    try:
        doc = _read_json(root, _MOMENTS)
        if not isinstance(doc, dict) or doc.get("v") != VERSION:
            return Moments()
        covered = parse_ranges(doc.get("covered"), n_episodes, "moments.covered")
        features = {}
        for name, part in doc["features"].items():
            arrays = {k: np.asarray(part[k], dtype=np.float64).reshape(-1)
                      for k in ("count", "shift", "sum", "sumsq", "low", "high")}
            if len({a.size for a in arrays.values()}) != 1:
                raise ValueError(f"moments of {name!r} of different sizes")
            features[str(name)] = arrays
        return Moments({e for a, b in covered for e in range(a, b)}, features)
    except (CorruptStoreError, KeyError, TypeError, ValueError, AttributeError):
        return Moments()


def save_moments(root: Path, moments: Moments, n_episodes: int) -> None:
    """Make the store's moments file hold ``moments`` (the caller merged them with the file's, under the store's
    writer lock)."""
    path = _path(root, _MOMENTS)
    mask = np.zeros(n_episodes, dtype=bool)
    mask[sorted(moments.covered)] = True
    doc = {"v": VERSION, "covered": [list(r) for r in ranges_of(mask)],
           "features": {k: {s: v.tolist() for s, v in part.items()} for k, part in moments.features.items()}}
    check_in_store(root, path)
    path.parent.mkdir(exist_ok=True)
    atomic_write(path, json.dumps(doc, separators=(",", ":")).encode(), durable=False, root=root)


def write_report(root: Path, state: StoreState, episode_defects: list[Defect], dataset_defects: list[Defect],
                 notes: list[str]) -> None:
    """Keep the last reduction: the dataset's findings, the episodes' findings made by it (duplicates) with their
    episodes' identities, the notes, at the store's generation."""
    keys = identities(state, {d.episode for d in episode_defects if d.episode is not None})
    doc = {"v": VERSION, "generation": state.generation, "thresholds": dict(THRESHOLDS), "notes": notes,
           "episodes": [[e, *keys[e]] for e in sorted(keys)],
           "defects": [d.to_json() for d in [*dataset_defects, *episode_defects]]}
    path = _path(root, _REPORT)
    check_in_store(root, path)
    path.parent.mkdir(exist_ok=True)
    atomic_write(path, json.dumps(doc, separators=(",", ":")).encode(), durable=False, root=root)


def has_report(root: str | os.PathLike) -> bool:
    return (Path(root) / DOCTOR_DIR / _EPISODES).is_file() or (Path(root) / DOCTOR_DIR / _REPORT).is_file()


def _lines(root: Path) -> list[Any]:
    path = _path(root, _EPISODES)
    try:
        data = read_bounded(path, _MAX_FILE, root=root, what="doctor findings")
    except FileNotFoundError:
        return []
    out = []
    lines = data.splitlines()
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                out.append(load_json(line, f"{path}:{number}"))
            except CorruptStoreError:
                if number == len(lines):  # a line cut by a crash mid-append: its commit never happened
                    continue
                raise
    return out


def _defects(doc: dict, where: str) -> list[Defect]:
    raw = doc.get("defects", [])
    if not isinstance(raw, list):
        raise CorruptStoreError(f"{where}: 'defects' is not a list")
    return [Defect.from_json(d, where) for d in raw]


def _episode_keys(doc: Any, where: str) -> list[tuple[int, str | None, str | None]]:
    items = doc.get("episodes") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise CorruptStoreError(f"{where}: no episode list")
    out = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                and not isinstance(item[0], bool) and item[0] >= 0
                and all(k is None or isinstance(k, str) for k in item[1:])):
            raise CorruptStoreError(f"{where}: {item!r:.60} is not [episode, identity, fingerprint]")
        out.append((item[0], item[1], item[2]))
    return out


class _Places:
    """Where the episodes checked are now: the same number in a store no writer changed, else found by identity;
    None where deleted or changed since (see the module)."""

    def __init__(self, state: StoreState):
        self.state = state
        self.edited = state.source.get("kind") == "edited"
        self.now = ({key: (e, fp) for e, (key, fp) in identities(state).items() if key is not None}
                    if self.edited else {})

    def place(self, episode: int, key: str | None, fingerprint: str | None) -> int | None:
        if not self.edited:
            return episode if episode < len(self.state.table) else None
        e, fp = self.now.get(key, (None, None)) if key is not None else (None, None)
        return e if fp == fingerprint else None


def recorded_findings(root: Path, state: StoreState) -> tuple[dict[int, list[Defect]], int]:
    """The episode findings a store keeps, by the episode's number now (only its committed episodes; every line
    naming an episode adds to it: a resumed transcode checks some again, a camera may be decoded in a later run),
    and how many findings no longer apply (their episode deleted or changed since)."""
    places = _Places(state)
    done = state.complete_episodes()
    latest: dict[int, dict[Defect, None]] = {}  # a finding seen twice (an episode checked again) counts once
    stale = 0
    where = str(_path(root, _EPISODES))
    for doc in _lines(root):
        if not isinstance(doc, dict) or doc.get("v") != VERSION:
            continue
        now, gone = {}, set()
        for e, key, fingerprint in _episode_keys(doc, where):
            at = places.place(e, key, fingerprint)
            if at is None:
                gone.add(e)
            elif done[at]:
                now[e] = at
                latest.setdefault(at, {})
        for d in _defects(doc, where):
            at = now.get(d.episode) if d.episode is not None else None
            if at is not None:
                latest[at][_renumbered(d, at)] = None
            elif d.episode in gone:
                stale += 1
    return {e: list(found) for e, found in latest.items()}, stale


def _renumbered(d: Defect, episode: int) -> Defect:
    return d if d.episode == episode else replace(d, episode=episode)


def read_report(root: str | os.PathLike, state: StoreState | None = None, *, name: str | None = None
                ) -> DoctorReport | None:
    """The report a store keeps (None if the doctor never ran on it): the findings of each committed episode
    checked (renumbered as the store is now), the dataset's findings of the last reduction (dropped, with a note,
    when a writer changed the store since), and notes on what was not checked."""
    root = Path(root)
    if not has_report(root):
        return None
    state = read_state(root) if state is None else state
    per_episode, stale = recorded_findings(root, state)
    n = len(state.table)
    notes: list[str] = []
    defects = [d for found in per_episode.values() for d in found]
    doc = _read_json(root, _REPORT)
    if isinstance(doc, dict) and doc.get("v") == VERSION:
        where = str(_path(root, _REPORT))
        places = _Places(state)
        current = doc.get("generation") == state.generation or not places.edited
        keys = {e: (key, fp) for e, key, fp in _episode_keys(doc, where)}
        for d in _defects(doc, where):
            if d.episode is None:
                if current:
                    defects.append(d)
                continue
            at = places.place(d.episode, *keys.get(d.episode, (None, None)))
            if at is not None and at in per_episode:
                defects.append(_renumbered(d, at))
        if not current:
            notes.append("the checks of the dataset as a whole (stats, duplicates, dead channels, tasks) ran before "
                         "the store was last changed: ds.doctor() or `lerobot-zarr doctor --recheck` runs them again")
        notes.extend(str(x) for x in doc.get("notes", []) if isinstance(x, str))
    if stale:
        notes.append(f"{stale} findings no longer apply (their episodes were deleted or changed since they were "
                     f"checked; changed ones are checked again by ds.doctor())")
    checked = np.zeros(n, dtype=bool)
    checked[sorted(per_episode)] = True
    missing = int((~checked).sum())
    if missing:
        lacking = np.flatnonzero(~checked)
        notes.append(f"{missing} episodes were not checked (not in the store yet, made without the doctor, or "
                     f"changed since): {ranges_text(frame_ranges(lacking))}")
    thresholds = doc.get("thresholds") if isinstance(doc, dict) and isinstance(doc.get("thresholds"), dict) else None
    return DoctorReport(name or str(root), n, ranges_of(checked), defects, notes,
                        {k: float(v) for k, v in (thresholds or THRESHOLDS).items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)})

