"""Hostile-store fuzzer: random damage to every kind of file of a store, for tests of store reading and writing.

A store copied from elsewhere is untrusted input. :func:`make_bases` makes small healthy stores (a LeRobot folder
transcoded with raw and compressed cameras, one with a camera kept as mp4, one recorded and edited in place, with
shifted numbering and several packs) and samples every frame of each (the oracle). :func:`check` damages a copy
of one in one random way, from byte flips, zeroed ranges, truncation and deletion of any file (root, packs, shard
indexes, ``mp4.json``, mp4 files, zarr's copies, stats files) to edits of the root's JSON (a leaf replaced, an
entry of an encoded column moved, a compressed "bomb", deep nesting), shard index rows swapped with their crc32c
made to match, and symbolic links in any position (to a modified copy of what they replace, or into a folder
outside). The properties:

- every call (``verify``, opening, sampling, writing) returns or raises a typed error of :mod:`lerobot_zarr.errors`;
  nothing else, no hang (each case runs under an alarm);
- when ``verify()`` finds the store intact, every sample equals the oracle (never a wrong value after verify
  passed); with a symbolic link planted, any value served equals the oracle (nothing is read through the link);
- nothing outside the store is written, moved or deleted (the link targets are compared before and after);
- after ``verify(repair=True)`` of a store made from a folder, a store found intact samples as the oracle.

Used by ``tests/store/test_store_fuzz.py`` (a few hundred cases, ``LEROBOT_ZARR_STORE_FUZZ_CASES``) and
``benchmarks/fuzz_stores.py`` (many).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LeRobotZarrError
from .source_fuzz import alarm

__all__ = ["Base", "make_bases", "check", "MUTATIONS", "FuzzFailure"]

_STOP_S = 120.0
FEATURES = {"x": {"dtype": "float32", "shape": [3], "names": None},
            "cam": {"dtype": "image", "shape": [6, 8, 3], "names": None}}


class FuzzFailure(AssertionError):
    """A property of the fuzz failed: the message says which case and what happened."""


@dataclass
class Base:
    """A healthy store and what sampling it gives (the oracle)."""

    name: str
    path: Path
    source: Path | None  # the LeRobot folder it was made from (verify can repair from it)
    writable: bool
    reference: dict[str, Any] = field(default_factory=dict)
    items: dict[int, dict[str, Any]] = field(default_factory=dict)


def _sample(root: Path) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """Every frame with ``get_batch``, a few with ``ds[i]``, and every episode with ``ds.episode``."""
    from ..sampling.dataset import LeRobotZarrDataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = LeRobotZarrDataset(root)
    try:
        batch = {k: (list(v) if k == "task" else np.array(v)) for k, v in ds.get_batch(np.arange(len(ds))).items()}
        items = {int(i): ds[int(i)] for i in {0, len(ds) // 2, len(ds) - 1}}
        for e in ds.episodes.tolist():
            episode = ds.episode(e)
            for k, v in episode.items():
                batch[f"episode {e}: {k}"] = np.array(v)
        return batch, items
    finally:
        ds.close()


def make_bases(work: Path, *, video: bool = True) -> list[Base]:
    """The healthy stores (``video``: also one whose camera is kept as mp4, if PyAV is installed)."""
    from .. import create, open_dataset
    from .sample_data import write_sample_dataset

    work.mkdir(parents=True, exist_ok=True)
    bases = []
    src = write_sample_dataset(work / "src", n_episodes=5, lengths=(4, 7), state_dim=3, action_dim=3,
                               image_keys=("observation.images.a", "observation.images.b"), image_shape=(6, 8, 3),
                               episodes_per_file=2, seed=4)
    open_dataset(src, root=work / "folder", storage={"observation.images.b": "lossless"}, progress=False,
                 pack_bytes=6 * 8 * 3 * 12)
    bases.append(Base("folder", work / "folder", src, False))
    if video:
        try:
            import av  # noqa: F401
        except ImportError:
            pass
        else:
            vsrc = write_sample_dataset(work / "vsrc", n_episodes=3, lengths=(3, 5), state_dim=2, action_dim=2,
                                        image_shape=(16, 16, 3), video_keys=("observation.images.v",),
                                        write_videos=True, episodes_per_file=2, seed=5)
            open_dataset(vsrc, root=work / "mp4", storage={"observation.images.v": "mp4"}, progress=False)
            bases.append(Base("mp4", work / "mp4", vsrc, False))
    rng = np.random.default_rng(6)
    with create(work / "recorded", fps=10, features=FEATURES, durable=False, pack_bytes=6 * 8 * 3 * 10) as ds:
        for k in range(7):
            n = 3 + k % 4
            ds.add_episode({"x": rng.random((n, 3), dtype=np.float32),
                            "cam": rng.integers(0, 255, (n, 6, 8, 3), dtype=np.uint8)}, task=f"t{k % 3}")
        ds.delete_episodes([0, 2])  # shifted numbering, a compaction
        ds.delete_frames(1, slice(0, 1))
        with ds.edit(2) as ep:
            ep["x"][:] = 0.5
    bases.append(Base("recorded", work / "recorded", None, True))
    for base in bases:
        base.reference, base.items = _sample(base.path)
    return bases


# ------------------------------------------------------------------------------------------------ mutations
def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.name != ".lock")


def _folders(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())


def _pick(rng: np.random.Generator, items: list) -> Any:
    return items[int(rng.integers(len(items)))]


def _flip(path: Path, rng: np.random.Generator) -> str:
    size = path.stat().st_size
    if not size:
        path.write_bytes(b"\x01")
        return f"wrote a byte into the empty {path.name}"
    at = int(rng.integers(size))
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ (1 << int(rng.integers(8)))]))
    return f"flipped a bit of byte {at} of {size}"


def m_flip(root: Path, rng: np.random.Generator, outside: Path) -> str:
    path = _pick(rng, _files(root))
    return f"{path.relative_to(root)}: {_flip(path, rng)}"


def m_zero(root: Path, rng: np.random.Generator, outside: Path) -> str:
    path = _pick(rng, _files(root))
    size = path.stat().st_size
    if not size:
        return f"{path.relative_to(root)}: empty, left alone"
    a = int(rng.integers(size))
    b = min(size, a + int(rng.integers(1, 4096)))
    with open(path, "r+b") as f:
        f.seek(a)
        f.write(bytes(b - a))
    return f"{path.relative_to(root)}: zeroed bytes {a}..{b} of {size}"


def m_truncate(root: Path, rng: np.random.Generator, outside: Path) -> str:
    path = _pick(rng, _files(root))
    size = path.stat().st_size
    new = int(rng.integers(size)) if size else 0
    os.truncate(path, new)
    return f"{path.relative_to(root)}: truncated from {size} to {new} bytes"


def m_extend(root: Path, rng: np.random.Generator, outside: Path) -> str:
    path = _pick(rng, _files(root))
    with open(path, "ab") as f:
        f.write(rng.bytes(int(rng.integers(1, 200))))
    return f"{path.relative_to(root)}: bytes appended"


def m_delete(root: Path, rng: np.random.Generator, outside: Path) -> str:
    path = _pick(rng, _files(root) + _folders(root))
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    return f"{path.relative_to(root)}: deleted"


def _decoy(path: Path, rng: np.random.Generator, outside: Path) -> Path:
    """A copy of ``path`` outside the store, with one byte of each file changed (what a followed link serves)."""
    target = outside / f"decoy-{int(rng.integers(1 << 30))}-{path.name}"
    if path.is_dir():
        shutil.copytree(path, target, symlinks=True)
        for f in _files(target):
            _flip(f, rng)
    else:
        shutil.copyfile(path, target)
        _flip(target, rng)
    return target


def m_link(root: Path, rng: np.random.Generator, outside: Path) -> str:
    """A file or folder replaced by a symbolic link to a modified copy of it outside the store."""
    path = _pick(rng, _files(root) + _folders(root))
    target = _decoy(path, rng, outside)
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    path.symlink_to(target, target_is_directory=target.is_dir())
    return f"{path.relative_to(root)}: replaced by a link to a modified copy outside"


def m_link_out(root: Path, rng: np.random.Generator, outside: Path) -> str:
    """A folder the store may write into next (a feature's pack folder, the stats) made a link to a folder
    outside: writes must not land there."""
    candidates = [p for p in _folders(root) if p.name == "c"] + [root / ".episode_stats", root / ".retired"]
    path = _pick(rng, candidates)
    sink = outside / f"sink-{int(rng.integers(1 << 30))}"
    if path.is_dir():
        shutil.copytree(path, sink, symlinks=True)
        shutil.rmtree(path)
    else:
        sink.mkdir()
    path.symlink_to(sink, target_is_directory=True)
    return f"{path.relative_to(root)}: replaced by a link to a folder outside (with its content)"


def _root_doc(root: Path) -> dict:
    return json.loads((root / "zarr.json").read_bytes())


def _write_root(root: Path, doc: Any) -> None:
    (root / "zarr.json").write_text(json.dumps(doc))


def _leaves(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(node, list) and node:
        return [leaf for i, v in enumerate(node) for leaf in _leaves(v, (*path, i))]
    return [path]


_VALUES = (None, True, 0, -1, 1, 2, 7, 2**31, 2**62, 2**63 - 1, -(2**62), 1e308, float("nan"), float("inf"), 0.5,
           "", "x", "raw", "compact", "mp4", "../x", "a/b", [], {}, [0, 1], [[0, 1]], {"codec": "nope"},
           "AAAAAAAAAAA=", "eJwDAAAAAAE=")


def m_root_leaf(root: Path, rng: np.random.Generator, outside: Path) -> str:
    """A leaf of the root's JSON (attributes or consolidated metadata) replaced by another JSON value."""
    doc = _root_doc(root)
    path = _pick(rng, _leaves(doc))
    value = _pick(rng, list(_VALUES))
    node = doc
    for k in path[:-1]:
        node = node[k]
    if path:
        node[path[-1]] = value
    _write_root(root, doc)
    return f"zarr.json: {'.'.join(map(str, path))} = {value!r}"


def _columns(doc: dict) -> list[tuple[str, ...]]:
    attrs = doc["attributes"]["lerobot_zarr"]
    keys = [("episodes", k) for k in attrs.get("episodes", {})] + [("packs", "rows")]
    return [k for k in keys if isinstance(attrs.get(k[0], {}).get(k[1]), str)]


def m_root_column(root: Path, rng: np.random.Generator, outside: Path) -> str:
    """One entry of an encoded column of the episode table (or the packs' rows) changed, the rest kept."""
    doc = _root_doc(root)
    attrs = doc["attributes"]["lerobot_zarr"]
    group, key = _pick(rng, _columns(doc))
    values = np.cumsum(np.frombuffer(zlib.decompress(base64.b64decode(attrs[group][key])), "<i8"))
    if not len(values):
        return f"zarr.json: {group}.{key} is empty, left alone"
    i = int(rng.integers(len(values)))
    values = values.copy()
    values[i] += int(_pick(rng, [1, -1, 2, -2, 5, 1 << 20, 1 << 40, -(1 << 40)]))
    diffs = np.diff(values, prepend=np.int64(0)).astype("<i8")
    attrs[group][key] = base64.b64encode(zlib.compress(diffs.tobytes())).decode()
    _write_root(root, doc)
    return f"zarr.json: {group}.{key}[{i}] changed"


def m_root_bomb(root: Path, rng: np.random.Generator, outside: Path) -> str:
    """A column replaced by a compressed bomb, or the whole root by deeply nested JSON."""
    if rng.random() < 0.3:
        depth = int(rng.integers(100, 100_000))
        (root / "zarr.json").write_text("[" * depth + "]" * depth)
        return f"zarr.json: {depth} nested lists"
    doc = _root_doc(root)
    group, key = _pick(rng, _columns(doc))
    doc["attributes"]["lerobot_zarr"][group][key] = base64.b64encode(zlib.compress(bytes(64 << 20), 9)).decode()
    _write_root(root, doc)
    return f"zarr.json: {group}.{key} = 64 MiB of zeros, compressed"


def m_swap_index(root: Path, rng: np.random.Generator, outside: Path) -> str:
    """Two rows of a compact pack's shard index swapped and its crc32c recomputed: only the hashes tell."""
    from ..store.state import read_state
    from ..utils.hashing import crc32c

    try:
        state = read_state(root)
    except LeRobotZarrError:
        return m_flip(root, rng, outside)
    compact = [n for n, s in state.arrays.items() if s.storage == "compact"]
    packs = [k for k, r in enumerate(state.packs.rows.tolist()) if r > 1]
    if not compact or not packs:
        return m_flip(root, rng, outside)
    name, pack = _pick(rng, compact), _pick(rng, packs)
    rows = int(state.packs.rows[pack])
    from ..store.state import chunk_path

    path = Path(chunk_path(root, name, pack, state.arrays[name].ndim))
    if not path.is_file():
        return m_flip(root, rng, outside)
    data = bytearray(path.read_bytes())
    index = np.frombuffer(bytes(data[:16 * rows]), "<u8").reshape(rows, 2).copy()
    a, b = (int(v) for v in rng.choice(rows, 2, replace=False))
    index[[a, b]] = index[[b, a]]
    data[:16 * rows] = index.tobytes()
    data[16 * rows:16 * rows + 4] = crc32c(index.tobytes()).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return f"{path.relative_to(root)}: index rows {a} and {b} swapped, crc32c made to match"


def m_mp4_json(root: Path, rng: np.random.Generator, outside: Path) -> str:
    indexes = sorted(root.glob("*/mp4.json"))
    if not indexes:
        return m_root_leaf(root, rng, outside)
    path = _pick(rng, indexes)
    doc = json.loads(path.read_bytes())
    key = _pick(rng, ["files", "file", "from_timestamp", "to_timestamp"])
    if doc[key]:
        i = int(rng.integers(len(doc[key])))
        doc[key][i] = _pick(rng, [-1, 5, 0.5, float("nan"), 1e300, "../../x.mp4", "/etc/passwd", None, "a//b"])
    path.write_text(json.dumps(doc))
    return f"{path.relative_to(root)}: {key} entry changed"


MUTATIONS = {"flip": (m_flip, 6), "zero": (m_zero, 3), "truncate": (m_truncate, 2), "extend": (m_extend, 1),
             "delete": (m_delete, 2), "link": (m_link, 3), "link out": (m_link_out, 2), "root leaf": (m_root_leaf, 4),
             "root column": (m_root_column, 3), "root bomb": (m_root_bomb, 1), "swap index": (m_swap_index, 2),
             "mp4.json": (m_mp4_json, 1)}


# ------------------------------------------------------------------------------------------------ the check
def _snapshot(folder: Path) -> dict[str, str]:
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def _typed(what: str, fn, case: str) -> tuple[bool, Any]:
    """(True, result) or (False, the typed error); anything else is a failure of the fuzz."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return True, fn()
    except LeRobotZarrError as exc:
        return False, exc
    except Exception as exc:  # noqa: BLE001 - what the fuzz exists to find
        raise FuzzFailure(f"{case}: {what} raised {type(exc).__name__}: {exc}") from exc


def _same(got: dict[str, Any], want: dict[str, Any]) -> str | None:
    for k, v in want.items():
        if k not in got:
            return f"{k} missing"
        g = got[k]
        if isinstance(v, list) or isinstance(g, list):
            if list(g) != list(v):
                return f"{k} differs"
        elif not np.array_equal(np.asarray(g), np.asarray(v), equal_nan=np.asarray(v).dtype.kind == "f"):
            return f"{k} differs"
    return None


def _compare(base: Base, root: Path, case: str) -> tuple[bool, str | None]:
    """(sampled, difference): whether every sample could be read, and what differs from the oracle."""
    ok, result = _typed("sampling", lambda: _sample(root), case)
    if not ok:
        return False, None
    batch, items = result
    diff = _same(batch, base.reference)
    for i, item in base.items.items():
        d = _same(items.get(i, {}), item)
        if d and not diff:
            diff = f"ds[{i}]: {d}"
    return True, diff


def _write(root: Path) -> None:
    """What a writer does to a store it opens: append, delete (with compaction), edit, close."""
    from ..writing.writer import WritableDataset

    with WritableDataset(root) as w:
        w.add_episode({"x": np.full((9, 3), 0.25, np.float32), "cam": np.full((9, 6, 8, 3), 7, np.uint8)}, task="new")
        w.delete_episodes([0])
        with w.edit(0) as ep:
            ep["x"][:] = 1.0


def check(base: Base, work: Path, rng: np.random.Generator, kind: str | None = None) -> str:
    """Damage a copy of ``base`` in one random way (or of ``kind``) and check the properties (module docstring).
    Returns how the case ended (for counts); raises :class:`FuzzFailure` when a property fails."""
    from ..writing.integrity import verify

    root, outside = work / "store", work / "outside"
    shutil.copytree(base.path, root, symlinks=True)
    (root / ".lock").unlink(missing_ok=True)
    outside.mkdir()
    names = [k for k in MUTATIONS if kind is None or k == kind]
    weights = np.array([MUTATIONS[k][1] for k in names], dtype=float)
    kind = names[int(rng.choice(len(names), p=weights / weights.sum()))]
    what = MUTATIONS[kind][0](root, rng, outside)
    case = f"[{base.name}] {kind}: {what}"
    linked = kind.startswith("link")
    before = _snapshot(outside)
    with alarm(_STOP_S):  # a hang raises in _typed: a failure naming the case
        verified, report = _typed("verify()", lambda: verify(root, progress=False), case)
        intact = verified and report.ok
        sampled, diff = _compare(base, root, case)
        if diff and (intact or linked):
            raise FuzzFailure(f"{case}: {'verify found the store intact' if intact else 'with a link planted'}, "
                              f"but a sample differs from the original ({diff})")
        outcome = ("intact" if intact else "damage reported" if verified else "refused") + (
            ", samples correct" if sampled and not diff else ", samples differ" if sampled else ", sampling refused")
        if base.writable and rng.random() < 0.5:
            wrote, _ = _typed("writing", lambda: _write(root), case)
            outcome += ", written" if wrote else ", writing refused"
        if base.source is not None and verified and not intact and rng.random() < 0.3:
            repaired, _ = _typed("verify(repair=True)", lambda: verify(root, repair=True, progress=False), case)
            ok_now, again = _typed("verify() after repair", lambda: verify(root, progress=False), case)
            if ok_now and again.ok:
                sampled, diff = _compare(base, root, case)
                if not sampled or diff:
                    raise FuzzFailure(f"{case}: intact after repair, but sampling "
                                      f"{'failed' if not sampled else f'differs ({diff})'}")
                outcome += ", repaired"
    if _snapshot(outside) != before:
        raise FuzzFailure(f"{case}: a file outside the store was written, moved or deleted")
    return outcome
