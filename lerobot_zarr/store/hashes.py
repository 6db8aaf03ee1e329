"""Content hashes of a store (the ``hashes`` root attribute of :mod:`lerobot_zarr.store`): the CRC-32C of each
committed episode and feature, kept by the episode's location, and the hash of the root itself."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import CorruptStoreError
from ..utils.hashing import ALGORITHM, crc32c
from .tables import EpisodeTable, appended, checked_int, location_key, parse_ranges, ranges_of, sorted_distinct

__all__ = ["ContentHashes", "root_hash"]


class ContentHashes:
    """The content hash (CRC-32C, :mod:`lerobot_zarr.utils.hashing`) of each committed episode and feature, keyed
    by the episode's location (pack, row offset): rows are never given to another episode, so a hash stays with its
    rows while deletions renumber episodes, and an episode moved to other rows carries its hash explicitly. ``-1``: none
    recorded (an episode not fetched yet, a camera unavailable in it, or a store made before hashes existed).
    ``files``: hashes of fixed metadata files of the store (``<camera>/mp4.json``). Immutable.

    Read from a root, the columns are decoded when first used (writers, ``verify``): sampling never needs them,
    and opening a store of 100,000 episodes should not pay for them."""

    def __init__(self, keys: np.ndarray | None = None, values: Mapping[str, np.ndarray] | None = None,
                 files: Mapping[str, int] | None = None, *, pending: tuple | None = None):
        self._keys = np.zeros(0, np.int64) if keys is None else keys  # sorted, unique
        self._values = dict(values or {})  # feature -> int64 aligned with keys
        self._files = dict(files or {})
        self._pending = pending  # (doc, table, names, where): decoded on first use

    def _decoded(self) -> None:
        if self._pending is not None:
            self._keys, self._values, self._files = _decode_hashes(*self._pending)
            self._pending = None

    def readable(self) -> CorruptStoreError | None:
        """None if the columns decode, else the error saying what is wrong with them."""
        try:
            self._decoded()
        except CorruptStoreError as exc:
            return exc
        return None

    @property
    def keys(self) -> np.ndarray:
        self._decoded()
        return self._keys

    @property
    def values(self) -> Mapping[str, np.ndarray]:
        self._decoded()
        return self._values

    @property
    def files(self) -> Mapping[str, int]:
        self._decoded()
        return self._files

    def aligned(self, table: EpisodeTable, name: str, where: tuple[np.ndarray, np.ndarray] | None = None
                ) -> np.ndarray:
        """Hash of every episode of ``table`` for feature ``name`` (-1 where none is recorded); ``where``: the
        table's :meth:`positions`, when several features are looked up."""
        out = np.full(len(table), -1, dtype=np.int64)
        column = self.values.get(name)
        if column is None or not len(self.keys) or not len(table):
            return out
        at, hit = self.positions(table) if where is None else where
        out[hit] = column[at[hit]]
        return out

    def positions(self, table: EpisodeTable) -> tuple[np.ndarray, np.ndarray]:
        """Where each episode of ``table`` is among the keys, and whether it is there at all."""
        want = location_key(table.chunk, table.offset)
        at = np.minimum(np.searchsorted(self.keys, want), max(len(self.keys) - 1, 0))
        return at, (self.keys[at] == want) if len(self.keys) else np.zeros(len(table), dtype=bool)

    def updated(self, entries: Mapping[tuple[int, int], Mapping[str, int]], files: Mapping[str, int] | None = None
                ) -> ContentHashes:
        """These hashes with ``entries`` ``{(pack, offset): {feature: hash}}`` recorded (replacing earlier ones)."""
        if not entries and not files:
            return self
        names = sorted({*self.values, *(n for per in entries.values() for n in per)})
        new_keys = sorted_distinct(location_key([c for c, _ in entries], [o for _, o in entries])) if entries else \
            np.zeros(0, np.int64)
        if len(new_keys) and (not len(self.keys) or new_keys[0] > self.keys[-1]):
            # new episodes after every known one (an append's commit): O(1) amortized in the episodes (appended)
            by_key = {(int(c) << 40) | int(o): per for (c, o), per in entries.items()}
            fresh = {name: [-1 if (v := by_key[key].get(name)) is None else int(v) for key in new_keys.tolist()]
                     for name in names}
            values = {name: appended(self.values[name], fresh[name]) if name in self.values else
                      np.concatenate([np.full(len(self.keys), -1, dtype=np.int64), fresh[name]]) for name in names}
            return ContentHashes(appended(self.keys, new_keys), values, {**self.files, **(files or {})})
        if not len(self.keys):
            keys = np.concatenate([self.keys, new_keys])
            old_at = np.arange(len(self.keys))
        else:
            keys = sorted_distinct(np.concatenate([self.keys, new_keys]))
            old_at = np.searchsorted(keys, self.keys)
        values = {}
        for name in names:
            column = np.full(len(keys), -1, dtype=np.int64)
            if name in self.values:
                column[old_at] = self.values[name]
            values[name] = column
        for (chunk, offset), per in entries.items():
            i = int(np.searchsorted(keys, (int(chunk) << 40) | int(offset)))
            for name, value in per.items():
                values[name][i] = -1 if value is None else int(value)
        return ContentHashes(keys, values, {**self.files, **(files or {})})

    def restricted(self, table: EpisodeTable, names: Iterable[str]) -> ContentHashes:
        """Only the hashes of ``table``'s episodes and of ``names``."""
        names = [n for n in names if n in self.values]
        want = sorted_distinct(location_key(table.chunk, table.offset)) if len(table) else np.zeros(0, np.int64)
        keep = np.isin(self.keys, want)
        return ContentHashes(self.keys[keep], {n: self.values[n][keep] for n in names}, dict(self.files))

    def to_json(self, table: EpisodeTable, names: Iterable[str]) -> dict[str, Any]:
        features = {}
        where = self.positions(table) if len(self.keys) and len(table) else None
        for name in names:
            column = self.aligned(table, name, where)
            missing = ranges_of(column < 0)
            features[name] = {ALGORITHM: base64.b64encode(column.astype("<u4").tobytes()).decode("ascii"),
                              "missing": [list(r) for r in missing]}
        return {"algorithm": ALGORITHM, "features": features, "files": dict(self.files)}

    @classmethod
    def from_json(cls, doc: Any, table: EpisodeTable, names: Iterable[str], where: str) -> ContentHashes:
        """Hashes read from a root: the structure checked now, the columns decoded (and checked) when used."""
        if doc is None:
            return cls()
        if not isinstance(doc, Mapping) or doc.get("algorithm") != ALGORITHM:
            raise CorruptStoreError(f"{where}: 'hashes' must be an object with algorithm {ALGORITHM!r}")
        features, files = doc.get("features", {}), doc.get("files", {})
        if not isinstance(features, Mapping) or not isinstance(files, Mapping):
            raise CorruptStoreError(f"{where}: hashes.features and hashes.files must be objects")
        root = doc.get("root")
        if root is not None:
            checked_int(root, f"{where}: hashes.root", 0, 2**32 - 1)
        return cls(pending=(doc, table, tuple(names), where))


def _decode_hashes(doc: Mapping, table: EpisodeTable, names: tuple[str, ...], where: str
                   ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, int]]:
    n = len(table)
    keys = location_key(table.chunk, table.offset)
    order = None if not n or (np.diff(keys) > 0).all() else np.argsort(keys, kind="stable")
    if order is not None and len(np.unique(keys)) != n:
        raise CorruptStoreError(f"{where}: two episodes share a location (episodes.chunk/offset)")
    values = {}
    for name in names:
        entry = doc["features"].get(name)
        if entry is None:
            continue
        at = f"{where}: hashes.features[{name!r}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get(ALGORITHM), str):
            raise CorruptStoreError(f"{at} must be an object with an encoded {ALGORITHM!r} column")
        text = entry[ALGORITHM]
        if len(text) != 4 * ((4 * n + 2) // 3):
            raise CorruptStoreError(f"{at}: a column of {len(text)} characters for {n} episodes")
        try:
            raw = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
            raise CorruptStoreError(f"{at}: undecodable column ({exc})") from None
        if len(raw) != 4 * n:
            raise CorruptStoreError(f"{at}: a column of {len(raw)} bytes for {n} episodes")
        column = np.frombuffer(raw, dtype="<u4").astype(np.int64)
        for a, b in parse_ranges(entry.get("missing", []), n, f"{at}.missing"):
            column[a:b] = -1
        values[name] = column if order is None else column[order]
    files = {str(key): checked_int(value, f"{where}: hashes.files[{str(key)!r:.60}]", 0, 2**32 - 1)
             for key, value in doc["files"].items()}
    return (keys if order is None else keys[order]), values, files


def root_hash(attrs: Mapping[str, Any]) -> int:
    """Content hash of the root state (every attribute but ``hashes``, in a canonical JSON form): damage to the
    root that still parses (a changed task string, stats, fps...) shows in ``verify``."""
    body = {k: v for k, v in attrs.items() if k != "hashes"}
    return crc32c(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
