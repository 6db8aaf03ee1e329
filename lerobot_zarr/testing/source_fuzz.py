"""Random damage to a LeRobot dataset's metadata, for fuzz tests of source reading (needs ``hypothesis``).

:func:`mutations` draws edits of ``meta/info.json`` and of the episode table (``meta/episodes/*.parquet`` of v3,
``meta/episodes.jsonl`` of v2.1) of a small dataset; :func:`check` applies them to a copy and opens it with
``open_dataset``. The property: the open gives the original frames (every frame, every numeric feature it returns,
equal to the data files' rows read with pyarrow) or raises an error of :mod:`lerobot_zarr.errors`; never another
exception, never a hang (each open runs under an alarm). Used by ``tests/lerobot_format/test_source_fuzz.py`` (a few
examples) and ``benchmarks/fuzz_sources.py`` (many).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

from ..errors import LeRobotZarrError

__all__ = ["Base", "make_base", "mutations", "apply", "check", "describe", "alarm", "Hang"]

EPISODES_V3 = "meta/episodes/chunk-000/file-000.parquet"
EPISODES_V21 = "meta/episodes.jsonl"
_TEXTS = ("data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet", "{chunk_index.__class__}", "{0}", "{",
          "../x/{file_index}", "data/chunk-{chunk_index:099d}/file-{file_index:03d}.parquet",
          "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet", "v2.1", "v3.0", "v3.1", "v1.6",
          "float32", "float64", "int8", "int64", "bool", "image", "video", "string", "observation.state", "action",
          "timestamp", "pick the cube")
_ARROW_TYPES = (pa.float64(), pa.string(), pa.int32(), pa.null(), pa.list_(pa.int64()))
_STOP_S = 60.0


@dataclass(frozen=True)
class Base:
    """A small healthy dataset and what its data files hold (the oracle)."""

    path: Path
    version: str
    info_paths: tuple[tuple[str, ...], ...]  # keys of info.json that mutations target
    columns: tuple[str, ...]  # v3: columns of the episode table
    rows: int  # v3: episodes; v2.1: lines of episodes.jsonl
    reference: dict[str, np.ndarray]  # numeric feature -> frames in global index order


def make_base(path: Path, version: str) -> Base:
    """Write the dataset (4 episodes, 2 per data file for v3) and read its frames with pyarrow."""
    from .sample_data import write_sample_dataset

    src = write_sample_dataset(path, version=version, n_episodes=4, lengths=[5, 7, 6, 8], seed=5,
                               episodes_per_file=2 if version == "v3.0" else None)
    info = json.loads((src / "meta" / "info.json").read_text())
    paths = [(k,) for k in info] + [("features", name) for name in info["features"]]
    paths += [("features", name, attr) for name, ft in info["features"].items() for attr in ft]
    table = pa.concat_tables(pq.read_table(p) for p in sorted((src / "data").rglob("*.parquet")))
    table = table.sort_by("index")
    reference = {}
    for name in table.column_names:
        values = table.column(name).to_pylist()
        reference[name] = np.asarray(values)
    if version == "v3.0":
        columns = tuple(pq.read_schema(src / EPISODES_V3).names)
        rows = pq.read_metadata(src / EPISODES_V3).num_rows
    else:
        columns, rows = (), len((src / EPISODES_V21).read_text().splitlines())
    return Base(src, version, tuple(paths), columns, rows, reference)


def json_values() -> st.SearchStrategy:
    scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.integers(-3, 40)
               | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12) | st.sampled_from(_TEXTS))
    return st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c,
                                                                                     max_size=3), max_leaves=8)


def mutations(base: Base) -> st.SearchStrategy[list[tuple]]:
    """One to three edits of ``base``'s info.json and episode table."""
    info = (st.tuples(st.just("info_set"), st.sampled_from(base.info_paths), json_values())
            | st.tuples(st.just("info_del"), st.sampled_from(base.info_paths)))
    row = st.integers(0, max(0, base.rows - 1))
    if base.version == "v3.0":
        column = st.sampled_from(base.columns)
        table = (st.tuples(st.just("cell"), column, row, json_values())
                 | st.tuples(st.just("col_drop"), column)
                 | st.tuples(st.just("col_cast"), column, st.sampled_from(range(len(_ARROW_TYPES))))
                 | st.tuples(st.just("row_swap"), row, row)
                 | st.tuples(st.just("row_drop"), row)
                 | st.tuples(st.just("row_dup"), row))
    else:
        key = st.sampled_from(["episode_index", "length", "tasks", "other"])
        table = (st.tuples(st.just("line_key"), row, key, json_values())
                 | st.tuples(st.just("line_del_key"), row, key)
                 | st.tuples(st.just("line_replace"), row, json_values())
                 | st.tuples(st.just("line_text"), row, st.text(max_size=20))
                 | st.tuples(st.just("row_swap"), row, row)
                 | st.tuples(st.just("row_drop"), row)
                 | st.tuples(st.just("row_dup"), row))
    return st.lists(info | table, min_size=1, max_size=3)


def apply(root: Path, base: Base, edits: list[tuple]) -> None:
    """Apply ``edits`` to the copy of ``base`` at ``root``."""
    for edit in edits:
        op = edit[0]
        if op.startswith("info"):
            _edit_info(root, edit)
        elif base.version == "v3.0":
            _edit_table(root / EPISODES_V3, edit)
        else:
            _edit_lines(root / EPISODES_V21, edit)


def _edit_info(root: Path, edit: tuple) -> None:
    path = root / "meta" / "info.json"
    info = json.loads(path.read_text())
    *parents, last = edit[1]
    node = info
    for key in parents:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        if edit[0] == "info_set":
            node[last] = edit[2]
        else:
            node.pop(last, None)
    path.write_text(json.dumps(info))  # NaN and Infinity as Python's json writes them


def _edit_table(path: Path, edit: tuple) -> None:
    table = pq.read_table(path)
    op = edit[0]
    if op in ("cell", "col_drop", "col_cast") and edit[1] not in table.column_names:
        return
    if op == "cell":
        name, row, value = edit[1], edit[2], edit[3]
        values = table.column(name).to_pylist()
        if row < len(values):
            values[row] = value
        try:
            array = pa.array(values, table.schema.field(name).type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            try:
                array = pa.array(values)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                array = pa.array([json.dumps(v) for v in values])
        table = table.set_column(table.schema.get_field_index(name), pa.field(name, array.type), array)
    elif op == "col_drop":
        table = table.drop_columns([edit[1]])
    elif op == "col_cast":
        name, target = edit[1], _ARROW_TYPES[edit[2]]
        column = table.column(name)
        try:
            array = column.cast(target)
        except (pa.ArrowException, TypeError, ValueError):
            array = pa.array([json.dumps(v) for v in column.to_pylist()])
        table = table.set_column(table.schema.get_field_index(name), pa.field(name, array.type), array)
    else:
        order = _reorder(list(range(table.num_rows)), edit)
        table = table.take(pa.array(order, pa.int64()))
    pq.write_table(table, path)


def _edit_lines(path: Path, edit: tuple) -> None:
    lines = path.read_text().splitlines()
    op = edit[0]
    if op in ("line_key", "line_del_key", "line_replace", "line_text") and edit[1] < len(lines):
        i = edit[1]
        if op == "line_text":
            lines[i] = edit[2].replace("\n", " ").replace("\r", " ")
        elif op == "line_replace":
            lines[i] = json.dumps(edit[2])
        else:
            try:
                row = json.loads(lines[i])
            except json.JSONDecodeError:
                row = None  # an earlier edit made the line text: nothing to edit by key
            if isinstance(row, dict):
                if op == "line_key":
                    row[edit[2]] = edit[3]
                else:
                    row.pop(edit[2], None)
                lines[i] = json.dumps(row)
    elif op.startswith("row"):
        lines = [lines[i] for i in _reorder(list(range(len(lines))), edit)]
    path.write_text("\n".join(lines) + "\n")


def _reorder(order: list[int], edit: tuple) -> list[int]:
    op, i = edit[0], edit[1]
    if i >= len(order):
        return order
    if op == "row_swap" and edit[2] < len(order):
        order[i], order[edit[2]] = order[edit[2]], order[i]
    elif op == "row_drop":
        del order[i]
    elif op == "row_dup":
        order.insert(i, order[i])
    return order


class Hang(Exception):
    pass


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise Hang in the main thread if the block runs longer than ``seconds`` (no alarm off the main thread)."""
    def ring(signum, frame):
        raise Hang(f"no answer after {seconds} s")

    try:
        previous = signal.signal(signal.SIGALRM, ring)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check(base: Base, edits: list[tuple], work: Path) -> str:
    """Open a copy of ``base`` damaged by ``edits``: returns ``"ok"`` (the frames are the original ones) or the
    name of the typed error raised; raises AssertionError for wrong frames, another exception or a hang."""
    from .. import open_dataset

    if work.exists():
        shutil.rmtree(work)
    src = work / "src"
    shutil.copytree(base.path, src)
    apply(src, base, edits)
    try:
        with alarm(_STOP_S), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = open_dataset(src, root=work / "store", progress=False)
            batch = ds.get_batch(np.arange(len(ds))) if len(ds) else {}
    except LeRobotZarrError as exc:
        return type(exc).__name__
    except Hang as exc:
        raise AssertionError(f"{edits}: open_dataset hung") from exc
    except Exception as exc:
        raise AssertionError(f"{edits}: {type(exc).__name__} is not a lerobot_zarr error: {exc}") from exc
    n = len(base.reference["index"])
    if len(ds) != n:  # fewer frames only where the metadata says so throughout (an unreferenced data file)
        info = json.loads((src / "meta" / "info.json").read_text())
        assert len(ds) < n and info.get("total_frames") == len(ds), \
            f"{edits}: {len(ds)} frames opened, the data files hold {n}"
        n = len(ds)
    for key, want in base.reference.items():
        want = want[:n]
        if key in batch:
            got = np.asarray(batch[key])
            assert got.shape[0] == n, f"{edits}: {key} has {got.shape[0]} frames"
            same = np.array_equal(got.reshape(n, -1).astype(np.float64), want.reshape(n, -1).astype(np.float64),
                                  equal_nan=True)
            assert same, f"{edits}: feature {key!r} differs from the data files"
    return "ok"


def describe(outcomes: dict[str, int]) -> str:
    total = sum(outcomes.values())
    return ", ".join(f"{k}: {v} ({100 * v / max(total, 1):.0f}%)" for k, v in sorted(outcomes.items(),
                                                                                     key=lambda kv: -kv[1]))
