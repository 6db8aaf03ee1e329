"""``verify``: re-read every committed episode of a store and check it against the content hashes recorded at commit.

Sampling trusts the store (memory maps, no check per sample); verification is explicit, as ``git fsck`` or ``zarr
check``: ``lerobot-zarr verify STORE`` or ``ds.verify()`` reads every committed row of every feature (raw rows, a
compact camera's encoded frames, the mp4 files of a camera kept as mp4), computes its CRC-32C and compares it with
the hash the commit recorded (:mod:`lerobot_zarr.store`, :mod:`lerobot_zarr.utils.hashing`). It also checks what the
table implies on disk (pack files present, of their size, reached through no symbolic link; compact shard indexes
against their crc32c; ``mp4.json`` against its hash) and zarr's copies of the commit (``frame_live``, the
``episode_*`` arrays).

The result is a :class:`VerifyReport`: per feature, the episodes found damaged (with why) and those that cannot be
checked (no hash recorded: a store made before hashes existed, or an in-place edit not committed yet).
``repair=True`` rewrites zarr's copies, finishes interrupted edits, and, for a store made from a Hub repo or a
LeRobot folder, fetches the damaged episodes again from it (then checks them again). A repair never drops what it
cannot put back: the source is opened and checked to hold what the store was made from (the recorded commit, or
the folder's fingerprint) before a damaged episode is let go; a source gone or changed leaves the damage in place,
reported. Episodes committed once (their hash recorded) that the store no longer holds are reported as damaged.
A store recorded or edited in place is its only copy: damaged episodes can then only be deleted.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..cameras.frame_codecs import decode_threads
from ..errors import CorruptStoreError, LeRobotZarrError, ReadOnlyStoreError, StoreLockedError
from ..sources.registry import describe_record, made_from_source
from ..store.cameras import MP4_INDEX, mp4_file, mp4_index_path, read_mp4_index
from ..store.committing import commit, live_matches, live_runs, repair_live
from ..store.hashes import ContentHashes, root_hash
from ..store.packs import open_pack, read_shard_index
from ..store.state import ATTRS_KEY, StoreState, chunk_path, read_root, read_state
from ..store.tables import ArraySpec
from ..store.zarr_meta import EPISODE_ARRAYS, ROOT
from ..utils.fileio import (
    WriterLock,
    check_in_store,
    find_links,
    load_json,
    open_nofollow,
    read_bounded,
)
from ..utils.hashing import compact_frame_header, crc32c, crc32c_at
from ..utils.progress import progress_bar
from .transaction import WriteTransaction
from .transcode import recorded_source, transcode

__all__ = ["verify", "VerifyReport"]

_BUFFER = 8 << 20  # bytes read at a time per thread
_EDITING = ".editing"
_STATS_PENDING = ".stats-pending"


@dataclass
class VerifyReport:
    """What :func:`verify` found. ``ok``: every committed episode of every stored feature was read and matches its
    recorded hash, and the store's other files agree with its commit.

    ``damaged[feature][episode]`` / ``unverifiable[feature][episode]``: why (the message names the file);
    ``store_problems``: files other than episode rows (zarr's copies, interrupted edits, symbolic links...);
    ``repaired``: what ``repair=True`` did; ``not_repaired``: damage it could not repair, and why."""

    root: Path
    generation: int
    episodes: int  # committed episodes
    checked: int = 0  # (episode, feature) pairs read and found intact
    bytes_read: int = 0
    seconds: float = 0.0
    damaged: dict[str, dict[int, str]] = field(default_factory=dict)
    unverifiable: dict[str, dict[int, str]] = field(default_factory=dict)
    store_problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    not_repaired: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.damaged or self.unverifiable or self.store_problems)

    @property
    def damaged_episodes(self) -> list[int]:
        """Episodes with at least one damaged feature."""
        return sorted({e for per in self.damaged.values() for e in per})

    @property
    def throughput(self) -> float:
        """Bytes read per second."""
        return self.bytes_read / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"root": str(self.root), "ok": self.ok, "generation": self.generation, "episodes": self.episodes,
                "checked": self.checked, "bytes_read": self.bytes_read, "seconds": round(self.seconds, 3),
                "damaged": {k: {str(e): why for e, why in v.items()} for k, v in self.damaged.items()},
                "unverifiable": {k: {str(e): why for e, why in v.items()} for k, v in self.unverifiable.items()},
                "store_problems": list(self.store_problems), "notes": list(self.notes),
                "repaired": list(self.repaired), "not_repaired": list(self.not_repaired)}

    def summary(self) -> str:
        """A few lines for a person: the verdict, then what is wrong, grouped by feature."""
        verdict = "intact" if self.ok else "DAMAGED" if self.damaged or self.store_problems else "not fully verifiable"
        lines = [f"{self.root}: {verdict} ({self.checked} episode features checked over {self.episodes} committed "
                 f"episodes, {self.bytes_read / 1e6:.1f} MB read in {self.seconds:.2f} s)"]
        for title, groups in (("damaged", self.damaged), ("unverifiable", self.unverifiable)):
            for name, per in groups.items():
                episodes = sorted(per)
                lines.append(f"  {title}: {name!r} in {len(episodes)} episode(s) {_short(episodes)}: "
                             f"{per[episodes[0]]}")
        lines += [f"  store: {p}" for p in self.store_problems]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  repaired: {r}" for r in self.repaired]
        lines += [f"  NOT repaired: {r}" for r in self.not_repaired]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _short(episodes: list[int]) -> str:
    return str(episodes[:12])[:-1] + (", ...]" if len(episodes) > 12 else "]")


def verify(store: str | os.PathLike, *, repair: bool = False, record: bool = False, token: str | bool | None = None,
           progress: bool = True) -> VerifyReport:
    """Check every committed episode of the store at ``store`` against its recorded content hashes (see the module
    docstring) and return a :class:`VerifyReport`.

    ``repair``: rewrite zarr's copies of the commit, finish interrupted edits, remove symbolic links planted in
    the store, and fetch damaged episodes again from the Hub repo (at the recorded commit; ``token``) or LeRobot
    folder the store was made from, then check them again. ``record``: record hashes for committed episodes that
    have none (a store made before hashes existed), trusting their bytes as they are now. Both take the writer
    lock (``StoreLockedError`` while another process writes)."""
    root = Path(store)
    started = time.perf_counter()
    state = read_state(root)
    report = VerifyReport(root, state.generation, int(state.complete_episodes().sum()))
    links = find_links(root)
    for link in links:
        report.store_problems.append(f"{link}: is a symbolic link; a store holds no links (one could point reads "
                                     f"or writes outside it)")
    computed = _check_episodes(state, report, progress)
    _check_store_files(state, report)
    report.seconds = time.perf_counter() - started
    latest = read_state(root)
    if latest.generation != state.generation:
        report.notes.append(f"a writer committed while verify ran (generation {state.generation} -> "
                            f"{latest.generation}): what it changed may show as damage; run verify again")
    if record or repair:
        try:
            _fix(root, state, report, computed, links, repair=repair, record=record, token=token, progress=progress)
        except CorruptStoreError as exc:  # a damaged root: nothing is committed on top of it
            report.not_repaired.append(str(exc))
    return report


# ------------------------------------------------------------------------------------------------- reading
def _edited(root: Path) -> dict[tuple[int, int], set[str]]:
    """Episodes (by location) edited in place since the last commit, and which features ("*": unreadable)."""
    out: dict[tuple[int, int], set[str]] = {}
    folder = root / _EDITING
    if not folder.is_dir() or folder.is_symlink():
        return out
    for entry in folder.iterdir():
        key = entry.name.split("-")
        if len(key) != 2 or not all(k.isdigit() for k in key):
            continue
        try:
            names = load_json(read_bounded(entry, 1 << 20, root=root, what="edit marker"), str(entry))
        except (OSError, LeRobotZarrError):
            names = None
        out[(int(key[0]), int(key[1]))] = set(map(str, names)) if isinstance(names, list) else {"*"}
    return out


@dataclass
class _Job:
    name: str
    spec: ArraySpec
    pack: int  # -1 for an mp4 file
    rows: int
    episodes: list[tuple[int, int, int]]  # (episode, offset, length), by offset
    file: str | None = None  # mp4 file name
    nbytes: int = 0


def _check_episodes(state: StoreState, report: VerifyReport, progress: bool) -> dict[str, np.ndarray]:
    """Hash every committed episode of every feature; fill the report. Returns the hashes computed (-1: none)."""
    root, table = state.root, state.table
    n = len(table)
    edited = _edited(root)
    broken = state.hashes.readable()
    if broken is not None:
        report.store_problems.append(f"the content hashes cannot be read ({broken}): every episode is unverifiable; "
                                     f"verify --record records them anew from the bytes as they are")
        state = replace(state, hashes=ContentHashes())
    jobs: list[_Job] = []
    computed = {name: np.full(n, -1, dtype=np.int64) for name in state.arrays}
    failures: dict[str, dict[int, str]] = {name: {} for name in state.arrays}
    for name, spec in state.arrays.items():
        held = state.materialized_mask(name)
        for e in state.unavailable_of(name):
            held[e] = False
        episodes = np.flatnonzero(held)
        if spec.storage == "mp4":
            jobs += _mp4_jobs(state, name, spec, episodes, failures[name])
            continue
        for pack in np.unique(table.chunk[episodes]).tolist():
            mine = episodes[table.chunk[episodes] == pack]
            mine = mine[np.argsort(table.offset[mine], kind="stable")]
            triples = [(int(e), int(table.offset[e]), int(table.length[e])) for e in mine]
            nbytes = sum(length for _, _, length in triples) * spec.frame_bytes
            jobs.append(_Job(name, spec, pack, int(state.packs.rows[pack]), triples, nbytes=nbytes))
    total = sum(job.nbytes for job in jobs)
    with progress_bar(total, f"verifying {root.name}", progress and total > 64 << 20, unit="B") as bar:
        def run(job: _Job) -> tuple[_Job, dict[int, int], dict[int, str], int]:
            hashes, reasons, nbytes = _hash_job(root, job)
            bar.update(job.nbytes)
            return job, hashes, reasons, nbytes

        with ThreadPoolExecutor(max(1, min(decode_threads(), len(jobs) or 1)),
                                thread_name_prefix="lerobot_zarr-verify") as pool:
            for job, hashes, reasons, nbytes in pool.map(run, jobs):
                report.bytes_read += nbytes
                for e, h in hashes.items():
                    computed[job.name][e] = h
                failures[job.name].update(reasons)
    for name in state.arrays:
        recorded = state.episode_hashes(name)
        held = state.materialized_mask(name)
        for e in state.unavailable_of(name):
            held[e] = False
        for e in np.flatnonzero(held).tolist():
            key = (int(table.chunk[e]), int(table.offset[e]))
            in_edit = name in edited.get(key, ()) or "*" in edited.get(key, ())
            if e in failures[name]:
                report.damaged.setdefault(name, {})[e] = failures[name][e]
            elif in_edit and (recorded[e] < 0 or computed[name][e] != recorded[e]):
                report.unverifiable.setdefault(name, {})[e] = (
                    "edited in place since the last commit: its hash is recorded at the writer's next commit (a "
                    "writer killed during an edit leaves this to the next writer)")
            elif recorded[e] < 0:
                report.unverifiable.setdefault(name, {})[e] = (
                    "no content hash recorded (committed by a lerobot_zarr without hashes, or listed as committed "
                    "by an edited root); verify --record trusts its bytes as they are now")
            elif computed[name][e] != recorded[e]:
                report.damaged.setdefault(name, {})[e] = (
                    f"content differs from the hash recorded at commit ({_what(state.arrays[name])}, rows "
                    f"{key[1]}..{key[1] + int(table.length[e])} of pack {key[0]}: crc32c {computed[name][e]:08x}, "
                    f"recorded {recorded[e]:08x})")
            else:
                report.checked += 1
        # committed once (a hash recorded at their commit), listed as not fetched now: a repair cut short
        for e in np.flatnonzero(~state.done_mask(name) & (recorded >= 0)).tolist():
            report.damaged.setdefault(name, {})[e] = (
                "committed once (its content hash is recorded) and no longer in the store: a repair could not "
                "fetch it again; verify --repair fetches it from the store's source")
    return computed


def _what(spec: ArraySpec) -> str:
    return {"raw": "the rows", "compact": "the encoded frames", "mp4": "the mp4 file"}[spec.storage]


def _mp4_jobs(state: StoreState, name: str, spec: ArraySpec, episodes: np.ndarray, failures: dict[int, str]
              ) -> list[_Job]:
    try:
        index = read_mp4_index(state.root, name, len(state.table))
    except CorruptStoreError as exc:
        failures.update({int(e): str(exc) for e in episodes})
        return []
    by_file: dict[int, list[tuple[int, int, int]]] = {}
    for e in episodes.tolist():
        f = int(index["file"][e])
        if f < 0:
            failures[e] = f"the mp4 index lists no file for episode {e}, which the root says is held"
            continue
        by_file.setdefault(f, []).append((e, 0, 0))
    jobs = []
    for f, triples in by_file.items():
        size = 0
        with contextlib.suppress(OSError, LeRobotZarrError):
            size = os.lstat(mp4_file(state.root, name, index["files"][f], check_link=False)).st_size
        jobs.append(_Job(name, spec, -1, 0, triples, file=index["files"][f], nbytes=size))
    return jobs


def _hash_job(root: Path, job: _Job) -> tuple[dict[int, int], dict[int, str], int]:
    """(hash per episode, why per episode that could not be read, bytes read)."""
    try:
        if job.file is not None:
            crc, nbytes = _hash_file(mp4_file(root, job.name, job.file, check_link=False))
            return {e: crc for e, _, _ in job.episodes}, {}, nbytes
        if job.spec.storage == "raw":
            return _hash_raw(root, job)
        return _hash_compact(root, job)
    except (LeRobotZarrError, OSError, ValueError) as exc:
        return {}, {e: str(exc) for e, _, _ in job.episodes}, 0


def _hash_file(path: str) -> tuple[int, int]:
    fd = open_nofollow(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return _hash_ranges(fd, size, [(0, size)])[0], size
    finally:
        os.close(fd)


def _hash_ranges(fd: int, size: int, ranges: list[tuple[int, int]]) -> list[int]:
    """CRC-32C of each byte range ``[start, stop)`` of a file of ``size`` bytes, hashed straight from a read-only
    map of it (no copy: as fast as a plain read of the same bytes)."""
    if not size:
        return [0 for _ in ranges]
    data = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    try:
        with contextlib.suppress(AttributeError, OSError):
            data.madvise(mmap.MADV_SEQUENTIAL)
        mapped = np.frombuffer(data, dtype=np.uint8)
        base, out = mapped.ctypes.data, []
        for start, stop in ranges:
            if not 0 <= start <= stop <= size:
                raise CorruptStoreError(f"bytes {start}..{stop} are outside the file's {size}")
            h = 0
            for at in range(start, stop, _BUFFER):  # in steps: the kernel reads ahead of the hash
                h = crc32c_at(base + at, min(_BUFFER, stop - at), h)
            out.append(h)
        del mapped
        return out
    finally:
        data.close()


def _hash_raw(root: Path, job: _Job) -> tuple[dict[int, int], dict[int, str], int]:
    spec = job.spec
    path = chunk_path(root, job.name, job.pack, spec.ndim)
    size = job.rows * spec.frame_bytes
    fd = open_pack(path, size, root=root, retired=None, what=f"pack {job.pack} of feature {job.name!r}",
                   feature=job.name)
    try:
        ranges = [(offset * spec.frame_bytes, (offset + length) * spec.frame_bytes)
                  for _, offset, length in job.episodes]
        hashes = _hash_ranges(fd, size, ranges)
    finally:
        os.close(fd)
    return {e: h for (e, _, _), h in zip(job.episodes, hashes, strict=True)}, {}, sum(b - a for a, b in ranges)


def _hash_compact(root: Path, job: _Job) -> tuple[dict[int, int], dict[int, str], int]:
    spec = job.spec
    path = chunk_path(root, job.name, job.pack, spec.ndim)
    where = f"{path} (pack {job.pack} of feature {job.name!r})"
    fd = open_pack(path, -1, root=root, retired=None, what=f"pack {job.pack} of feature {job.name!r}",
                   feature=job.name)
    try:
        index = read_shard_index(fd, spec, job.rows, 0, job.rows, where, allow_empty=True)
        size = os.fstat(fd).st_size
        data = mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else None
    finally:
        os.close(fd)
    hashes, reasons, total = {}, {}, 0
    try:
        mapped = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(1, np.uint8)
        base = mapped.ctypes.data
        entries = index.tolist()
        for e, offset, length in job.episodes:
            h = 0
            for row in range(offset, offset + length):
                start, nbytes = entries[row]
                if start < 0:
                    reasons[e] = f"{where}: row {row} (frame {row - offset} of episode {e}) was never written"
                    break
                h = crc32c_at(base + start, nbytes, crc32c(compact_frame_header(nbytes), h))
                total += nbytes
            else:
                hashes[e] = h
        del mapped
    finally:
        if data is not None:
            data.close()
    return hashes, reasons, total


# ------------------------------------------------------------------------------------------------- store files
def _check_store_files(state: StoreState, report: VerifyReport) -> None:
    root = state.root
    attrs = read_root(root)["attributes"][ATTRS_KEY]
    recorded = attrs.get("hashes", {}).get("root") if isinstance(attrs.get("hashes"), dict) else None
    if recorded is None:
        report.notes.append("the root zarr.json has no content hash (a store made before hashes): its metadata "
                            "(tasks, stats, info, the episode table) is unverifiable")
    elif root_hash(attrs) != recorded:
        report.store_problems.append(f"{root / ROOT}: its content differs from the hash recorded at its commit: the "
                                     f"metadata (tasks, stats, info, the episode table) cannot be trusted; restore "
                                     f"the store from a copy, or make it again from its source")
    bad_live = [pack for pack, runs in live_runs(state).items()
                if not live_matches(root, pack, int(state.packs.rows[pack]), runs)]
    if bad_live:
        report.store_problems.append(
            f"frame_live of pack(s) {_short(bad_live)} differs from the committed table: zarr and xarray readers "
            f"would see the wrong rows as live (lerobot_zarr itself reads the table); --repair rewrites it")
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(root / ".lock").st_mode):
            report.store_problems.append(f"{root / '.lock'}: is not a file (a folder?): no writer can open the store; "
                                         f"remove it")
    if state.log_records:  # zarr's copies are of the root's commit: the log is folded into them later
        report.notes.append(f"{len(state.log_records)} commit(s) in the commit log, checked, not folded into the "
                            f"root yet (its writer folds them; zarr readers see the root's commit meanwhile)")
    if state.log_records.ignored:
        report.notes.append(f"{state.log_records.ignored} byte(s) at the end of the commit log are not a whole "
                            f"record (an append cut short by a killed writer): not committed, ignored")
    stale = _stale_zarr_copies(read_state(root, log=False) if state.log_records else state)
    if stale:
        report.store_problems.append(f"zarr's copy of the episode table ({', '.join(stale)}) differs from the "
                                     f"commit: zarr and xarray readers would see other episodes; --repair rewrites it")
    for name, spec in state.arrays.items():
        if spec.storage != "mp4":
            continue
        recorded = state.hashes.files.get(f"{name}/{MP4_INDEX}")
        path = mp4_index_path(root, name)
        try:
            crc = _hash_file(check_in_store(root, path))[0]
        except (LeRobotZarrError, OSError) as exc:
            report.store_problems.append(f"{path}: unreadable ({exc})")
            continue
        if recorded is None:
            report.notes.append(f"{path}: no content hash recorded (a store made before hashes): unverifiable")
        elif crc != recorded:
            report.store_problems.append(f"{path}: differs from the hash recorded when the store was made (the "
                                         f"episodes' files and timestamps of camera {name!r} cannot be trusted)")
    if (root / _STATS_PENDING).exists():
        report.store_problems.append("stats.json may be stale: a writer was killed while committing an edit's "
                                     "stats (the next writer, or --repair, recomputes it)")
    edited = _edited(root)
    if edited:
        report.notes.append(f"{len(edited)} episode(s) edited in place since the last commit (a writer is editing, "
                            f"or was killed during an edit: the next writer, or --repair, records their stats and "
                            f"hashes)")


def _stale_zarr_copies(state: StoreState) -> list[str]:
    table = state.table
    columns = {"episode_start": table.start, "episode_end": table.end, "episode_length": table.length,
               "episode_task_index": table.task_index, "episode_chunk": table.chunk, "episode_offset": table.offset,
               "episode_frame": state.episode_frame()}
    stale = []
    for name in EPISODE_ARRAYS:
        want = columns.get(name)
        if want is None:
            continue
        try:
            got = read_bounded(state.root / name / "c" / "0", 8 * len(want), root=state.root, what=name)
        except (OSError, LeRobotZarrError):
            got = None
        if got != np.asarray(want, dtype="<i8").tobytes():
            stale.append(name)
    return stale


# ------------------------------------------------------------------------------------------------- repair
def _fix(root: Path, state: StoreState, report: VerifyReport, computed: Mapping[str, np.ndarray], links: list[Path],
         *, repair: bool, record: bool, token: Any, progress: bool) -> None:
    if state.root_intact is not None and not state.root_intact():
        report.not_repaired.append(f"{root / ROOT}: its content differs from the hash recorded at its commit; "
                                   f"nothing is committed on top of it (the table everything else is checked "
                                   f"against cannot be trusted): restore the store from a copy or make it again "
                                   f"from its source")
        return
    try:
        lock = WriterLock(root, blocking=False).__enter__()
    except (StoreLockedError, ReadOnlyStoreError) as exc:
        report.not_repaired.append(f"nothing changed: {exc}")
        return
    try:
        latest = read_state(root)
        if latest.generation != state.generation:
            report.not_repaired.append("nothing changed: the store was committed to since it was checked; run "
                                       "verify again")
            return
        if record:
            _record(latest, report, computed)
            latest = read_state(root)
        if repair and latest.logged:  # the commit log folded into a format-3 root (with the dataset stats)
            WriteTransaction(latest).recover()
            latest = read_state(root)
            report.repaired.append("folded the commit log into the root")
        if repair:
            for link in links:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(link)
                report.repaired.append(f"removed the symbolic link {link}")
            if any("frame_live" in p or "zarr's copy" in p for p in report.store_problems):
                commit(latest, previous=latest)
                repair_live(latest)
                report.repaired.append("rewrote zarr's copy of the commit (frame_live, episode_* arrays)")
    finally:
        lock.__exit__(None, None, None)
    if repair:
        _finish_edits(root, report)
        if report.damaged:
            _refetch(root, report, token=token, progress=progress)


def _record(state: StoreState, report: VerifyReport, computed: Mapping[str, np.ndarray]) -> None:
    if state.hashes.readable() is not None:
        state = replace(state, hashes=ContentHashes())  # unreadable columns: recorded anew
    table = state.table
    entries: dict[tuple[int, int], dict[str, int]] = {}
    for name, per in list(report.unverifiable.items()):
        for e in list(per):
            if per[e].startswith("no content hash") and computed[name][e] >= 0 and e not in \
                    report.damaged.get(name, {}):
                entries.setdefault((int(table.chunk[e]), int(table.offset[e])), {})[name] = int(computed[name][e])
                del per[e]
        if not per:
            del report.unverifiable[name]
    if entries:
        commit(state.with_hashes(entries), previous=state)
        report.repaired.append(f"recorded content hashes for {sum(len(v) for v in entries.values())} episode "
                               f"feature(s) that had none (trusting their bytes as they are now)")


def _finish_edits(root: Path, report: VerifyReport) -> None:
    """A writer killed during an edit left its stats (and hashes) to the next writer: be that writer."""
    if not ((root / _STATS_PENDING).exists() or (root / _EDITING).is_dir()):
        return
    state = read_state(root)
    if any(spec.storage != "raw" and not spec.is_text for spec in state.arrays.values()) \
            or not state.complete_episodes().all():
        return  # not a store writers open; edits never happen in one
    from .writer import WritableDataset

    try:
        WritableDataset(root).close()
    except LeRobotZarrError as exc:
        report.not_repaired.append(f"the interrupted edit was not finished ({exc})")
        return
    report.repaired.append("finished an interrupted edit (its stats and content hashes recorded)")
    report.store_problems[:] = [p for p in report.store_problems if "stats.json may be stale" not in p]
    for name, per in list(report.unverifiable.items()):
        for e in [e for e, why in per.items() if why.startswith("edited in place")]:
            del per[e]
        if not per:
            del report.unverifiable[name]


def _refetch(root: Path, report: VerifyReport, *, token: Any, progress: bool) -> None:
    """Fetch the damaged episodes again from the store's source, then check them again."""
    state = read_state(root)
    source = state.source
    damaged = {name: dict(per) for name, per in report.damaged.items()}
    episodes = sorted({e for per in damaged.values() for e in per})
    if not made_from_source(source):
        report.not_repaired.append(
            f"episodes {_short(episodes)}: this store was "
            f"{'recorded' if source.get('kind') == 'recorded' else 'edited'} in place, so it is their only copy; "
            f"delete them (ds.delete_episodes(...)) or restore the store from a backup")
        return
    try:  # before anything is dropped: the source is there and holds what the store was made from
        origin = recorded_source(root, episodes, token=token)
    except (LeRobotZarrError, OSError) as exc:
        report.not_repaired.append(f"episodes {_short(episodes)}: left as they are, damaged: {describe_record(source)} "
                                   f"cannot give them back as they were recorded ({exc}); make the source reachable "
                                   f"and run verify --repair again, or restore the store from a copy")
        return
    before = {name: state.episode_hashes(name) for name in damaged}
    with WriterLock(root):
        state = read_state(root)
        for name, per in damaged.items():
            spec = state.arrays[name]
            _drop_damaged_files(state, name, spec, sorted(per))
        commit(state.without_materialized({name: list(per) for name, per in damaged.items()}), previous=state)
    try:
        transcode(origin, root, episodes=episodes, progress=progress)
    except (LeRobotZarrError, OSError) as exc:
        report.not_repaired.append(f"episodes {_short(episodes)} could not be fetched again from "
                                   f"{describe_record(source)} ({exc}); verify reports them as missing until a "
                                   f"verify --repair (or an open that needs them) fetches them")
        return
    again = verify(root, progress=False)
    still = {name: {e: why for e, why in again.damaged.get(name, {}).items() if e in per}
             for name, per in damaged.items()}
    fixed = [e for e in episodes if not any(e in per for per in still.values())]
    now = read_state(root)
    for name, per in damaged.items():
        after = now.episode_hashes(name)
        changed = [e for e in per if before[name][e] >= 0 and after[e] >= 0 and after[e] != before[name][e]]
        if changed:
            report.notes.append(f"{name!r} of episodes {_short(changed)}: {describe_record(source)} now gives other "
                                f"bytes than were recorded when they were first committed (a decoder of another "
                                f"version?); the store holds what the source gives now")
    if fixed:
        report.repaired.append(f"fetched episodes {_short(fixed)} again from {describe_record(source)}: intact now")
    for name, per in still.items():
        for e, why in per.items():
            report.not_repaired.append(f"episode {e}, {name!r}: still damaged after fetching it again ({why})")
    for name in list(report.damaged):
        report.damaged[name] = {e: why for e, why in report.damaged[name].items() if e in still.get(name, {})}
        if not report.damaged[name]:
            del report.damaged[name]


def _drop_damaged_files(state: StoreState, name: str, spec: ArraySpec, episodes: list[int]) -> None:
    """Files that cannot be rewritten in place (a raw pack of the wrong size, a damaged mp4) are removed, so that
    fetching their episodes again makes them anew; a pack file is removed only if every episode it holds is being
    fetched again."""
    root, table = state.root, state.table
    if spec.storage == "mp4":
        index = read_mp4_index(root, name, len(table))
        for f in {int(index["file"][e]) for e in episodes if index["file"][e] >= 0}:
            path = check_in_store(root, f"{root}/{name}/videos/{index['files'][f]}")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return
    held = state.materialized_mask(name)
    for pack in np.unique(table.chunk[episodes]).tolist():
        in_pack = set(np.flatnonzero(held & (table.chunk == pack)).tolist())
        path = check_in_store(root, chunk_path(root, name, pack, spec.ndim))
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        wrong_size = spec.storage == "raw" and st.st_size != int(state.packs.rows[pack]) * spec.frame_bytes
        if (wrong_size or spec.storage == "compact" or not stat.S_ISREG(st.st_mode)) and in_pack <= set(episodes):
            try:
                os.rmdir(path) if stat.S_ISDIR(st.st_mode) else os.unlink(path)
            except OSError as exc:  # a folder holding files where the pack belongs: not ours to delete
                raise CorruptStoreError(f"{path}: a folder in place of a pack file could not be removed ({exc}); "
                                        f"remove it, then run verify --repair again", path=path) from None

