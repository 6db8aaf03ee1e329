"""A defect battery for the dataset doctor: LeRobot v3.0 datasets, each a synthetic dataset of
:func:`~lerobot_zarr.testing.sample_data.write_sample_dataset` with one kind of defect injected, and the clean
dataset it was made from.

:func:`write_case` writes one (``clean=True``: the same dataset without the defect) and returns a :class:`Case`:
where it is, what was injected (kind, episode, feature, frames) and which other findings the injection brings with
it (a value changed beyond stats.json's range also makes stats.json disagree with the data). After a change to the
data, stats.json is recomputed, so that nothing else is wrong. :data:`BATTERY` lists the kinds.

Run ``python -m lerobot_zarr.testing.defects OUT`` to write the whole battery into ``OUT/<kind>/`` and
``OUT/<kind>-clean/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..lerobot.format import aggregate_stats, per_episode_stats, stats_json
from ..lerobot.writers import nested_list, write_json
from .sample_data import camera_frames, write_sample_dataset

__all__ = ["Expected", "Case", "BATTERY", "write_case", "write_battery"]

FPS = 30
LENGTHS = (45, 50, 55, 40, 50, 60)  # episodes 1 and 4 have the same length (duplicates need it)
DATA_FILE = "data/chunk-000/file-000.parquet"
VIDEO = "observation.images.front"
IMAGE = "observation.images.wrist"


@dataclass(frozen=True)
class Expected:
    """A finding the doctor must make: its kind, episode (None: the dataset), feature, and frames (half-open runs
    that the finding's frames must equal; None: any)."""

    kind: str
    episode: int | None
    feature: str | None
    frames: tuple[tuple[int, int], ...] | None = None


@dataclass
class Case:
    """One dataset of the battery: its folder, the findings injected (``expected``), the other kinds the injection
    may bring (``also``), and whether the transcode takes the dataset (else it refuses it with an error: only
    ``lerobot-zarr doctor SOURCE`` reports it)."""

    path: pathlib.Path
    kind: str
    expected: list[Expected] = field(default_factory=list)
    also: frozenset[str] = frozenset()
    transcodes: bool = True


def _base(path: pathlib.Path, seed: int, **options: Any) -> pathlib.Path:
    kwargs = {"n_episodes": len(LENGTHS), "lengths": list(LENGTHS), "fps": FPS, "seed": seed,
              "tasks": ("pick the cube", "place the cube"), **options}
    return write_sample_dataset(path, **kwargs)


def _read(root: pathlib.Path) -> pa.Table:
    return pq.read_table(root / DATA_FILE)


def _column(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name).combine_chunks()
    depth, shape = 0, []
    typ = col.type
    while pa.types.is_fixed_size_list(typ):
        shape.append(typ.list_size)
        typ = typ.value_type
        depth += 1
    values = col
    for _ in range(depth):
        values = values.flatten()
    return values.to_numpy(zero_copy_only=False).reshape(len(col), *shape).copy()


def _write(root: pathlib.Path, table: pa.Table, changes: dict[str, np.ndarray | pa.Array], *,
           restat: bool = True) -> None:
    """Write the data file with some columns changed (numpy values in the column's type, or Arrow arrays as they
    are; schema metadata kept), one row group per episode as LeRobot writes them; then stats.json recomputed
    from the data (``restat``)."""
    columns = {}
    for name in table.column_names:
        value = changes.get(name)
        typ = table.schema.field(name).type
        if value is None:
            columns[name] = table.column(name)
        elif isinstance(value, (pa.Array, pa.ChunkedArray)):
            columns[name] = value
        else:
            columns[name] = nested_list(value, True) if pa.types.is_fixed_size_list(typ) else pa.array(
                value.reshape(-1), type=typ)
    new = pa.table(columns).replace_schema_metadata(table.schema.metadata)
    bounds = np.cumsum(LENGTHS) if new.num_rows == sum(LENGTHS) else np.array([new.num_rows])
    with pq.ParquetWriter(root / DATA_FILE, new.schema) as writer:
        for a, b in zip(np.r_[0, bounds[:-1]], bounds, strict=True):
            writer.write_table(new.slice(int(a), int(b - a)))
    if restat:
        _restat(root, new)


def _restat(root: pathlib.Path, table: pa.Table) -> None:
    """meta/stats.json of the numeric features recomputed from ``table`` (cameras' stats kept)."""
    stats = json.loads((root / "meta/stats.json").read_text())
    lengths = np.bincount(_column(table, "episode_index"))
    info = json.loads((root / "meta/info.json").read_text())
    for name, feature in info["features"].items():
        if feature["dtype"] not in ("image", "video") and name in table.column_names:
            values = _column(table, name)
            stats[name] = stats_json(aggregate_stats(per_episode_stats(values, lengths)))
    write_json(root / "meta/stats.json", stats)


def _rows(episode: int) -> slice:
    start = sum(LENGTHS[:episode])
    return slice(start, start + LENGTHS[episode])


def _edit_episode_table(root: pathlib.Path, column: str, edit: Callable[[np.ndarray], np.ndarray]) -> None:
    """Rewrite one int64 column of meta/episodes as ``edit`` (its values, by row) makes it."""
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    episodes = pq.read_table(path)
    values = edit(np.asarray(episodes.column(column).to_pylist()))
    pq.write_table(episodes.set_column(episodes.column_names.index(column), column, pa.array(values, pa.int64())),
                   path)


# the injections: each makes the dataset at ``path`` (clean: without the defect) and says what it injected -------
def _nan(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = _base(path, seed)
    case = Case(root, "nan", [Expected("nan", 2, "action", ((10, 13),))])
    if not clean:
        table = _read(root)
        action = _column(table, "action")
        action[_rows(2)][10:13, 3] = np.nan
        _write(root, table, {"action": action}, restat=False)  # stats of a NaN are NaN: nothing to recompute
    return case


def _jump(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = _base(path, seed)
    case = Case(root, "jump", [Expected("jump", 3, "observation.state", ((20, 21),))],
                also=frozenset({"out_of_range"}))
    if not clean:
        table = _read(root)
        state = _column(table, "observation.state")
        episode = state[_rows(3)]
        episode[20, 1] += 40 * float(np.ptp(episode[:, 1]))  # a one-frame glitch far out of the episode
        _write(root, table, {"observation.state": state})
    return case


def _constant(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = _base(path, seed)
    case = Case(root, "constant", [Expected("constant", 1, "action", ((0, LENGTHS[1]),))])
    if not clean:
        table = _read(root)
        action = _column(table, "action")
        action[_rows(1)] = action[_rows(1)][:1]  # a stalled stream: the first command repeated
        _write(root, table, {"action": action})
    return case


def _out_of_range(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = _base(path, seed)
    case = Case(root, "out_of_range", also=frozenset({"stats_mismatch"}))
    if clean:
        return case
    table = _read(root)
    action = _column(table, "action")
    episode = int(np.argmax([action[_rows(e)][:, 0].max() for e in range(len(LENGTHS))]))
    values = action[_rows(episode)][:, 0]
    others = max(float(action[_rows(e)][:, 0].max()) for e in range(len(LENGTHS)) if e != episode)
    # stats.json says channel 0 never exceeds the second episode's highest value (a stale or hand-made stat)
    ceiling = max(others, float(np.sort(values)[-3]))
    stats = json.loads((root / "meta/stats.json").read_text())
    stats["action"]["max"][0] = ceiling
    write_json(root / "meta/stats.json", stats)
    above = np.flatnonzero(values > ceiling)
    runs = tuple((int(a), int(b)) for a, b in _runs(above))
    case.expected.append(Expected("out_of_range", episode, "action", runs))
    case.expected.append(Expected("stats_mismatch", None, "action"))
    return case


def _runs(frames: np.ndarray) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for f in frames.tolist():
        if out and out[-1][1] == f:
            out[-1] = (out[-1][0], f + 1)
        else:
            out.append((f, f + 1))
    return out


def _short(path: pathlib.Path, seed: int, clean: bool) -> Case:
    lengths = list(LENGTHS) if clean else [*LENGTHS[:5], 1]
    root = write_sample_dataset(path, n_episodes=len(lengths), lengths=lengths, fps=FPS, seed=seed)
    return Case(root, "short_episode", [Expected("short_episode", 5, None, ((0, 1),))])


def _empty(path: pathlib.Path, seed: int, clean: bool) -> Case:
    """meta/episodes gives episode 2 no frame (its rows still in the data file): the transcode refuses it."""
    root = _base(path, seed)
    case = Case(root, "short_episode", [Expected("short_episode", 2, None, ())], also=frozenset({"orphan_rows"}),
                transcodes=False)
    if not clean:
        _edit_episode_table(root, "length", lambda lengths: np.where(np.arange(lengths.size) == 2, 0, lengths))
    return case


def _timestamps(kind: str, episode: int, edit: Callable[[np.ndarray], None], expected: list[Expected],
                transcodes: bool) -> Callable[[pathlib.Path, int, bool], Case]:
    def make(path: pathlib.Path, seed: int, clean: bool) -> Case:
        root = _base(path, seed)
        if not clean:
            table = _read(root)
            ts = _column(table, "timestamp")
            edit(ts[_rows(episode)])
            _write(root, table, {"timestamp": ts})
        return Case(root, kind, expected, transcodes=transcodes)
    return make


def _drift(ts: np.ndarray) -> None:
    ts[:] = (np.arange(len(ts)) / FPS * (1 + 2e-3)).astype(ts.dtype)  # a clock 0.2 % fast: steps stay in tolerance


def _gap(ts: np.ndarray) -> None:
    ts[20:] += np.float32(1 / FPS)  # a dropped frame: the rows go on, the time skips one


def _duplicate(ts: np.ndarray) -> None:
    ts[21] = ts[20]


def _backwards(ts: np.ndarray) -> None:
    ts[[30, 31]] = ts[[31, 30]]


def _frame_index(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = _base(path, seed)
    if not clean:
        table = _read(root)
        index = _column(table, "frame_index")
        rows = index[_rows(0)]
        rows[[5, 6]] = rows[[6, 5]]
        _write(root, table, {"frame_index": index})
    return Case(root, "frame_index", [Expected("frame_index", 0, "frame_index", ((5, 7),))], transcodes=False)


def _episode_index(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = _base(path, seed)
    if not clean:
        table = _read(root)
        index = _column(table, "episode_index")
        index[_rows(2)][10:16] = 3  # rows of episode 2 claiming to be episode 3's
        _write(root, table, {"episode_index": index}, restat=False)
    return Case(root, "episode_index", [Expected("episode_index", 2, "episode_index", ((10, 16),)),
                                        # episode 2 lacks those rows, episode 3 holds its frames 10-15 twice
                                        Expected("orphan_rows", 2, "episode_index", ((10, 16),)),
                                        Expected("orphan_rows", 3, "episode_index", ((10, 16),))],
                also=frozenset({"stats_mismatch"}), transcodes=False)  # its stats were of the rows as they were


def _index(path: pathlib.Path, seed: int, clean: bool) -> Case:
    """From frame 25 of episode 3 on, the global ``index`` skips 7 values (rows deleted by hand, the column not
    renumbered): LeRobot looks frames up by it."""
    root = _base(path, seed)
    if not clean:
        table = _read(root)
        index = _column(table, "index")
        index[_rows(3)][25:] += 7
        _write(root, table, {"index": index})
    return Case(root, "index", [Expected("index", 3, "index", ((25, LENGTHS[3]),))], transcodes=False)


def _frame_index_shifted(path: pathlib.Path, seed: int, clean: bool) -> Case:
    """Episode 4's frame_index counts from 1 (a recorder numbering frames as people count)."""
    root = _base(path, seed)
    if not clean:
        table = _read(root)
        index = _column(table, "frame_index")
        index[_rows(4)] += 1
        _write(root, table, {"frame_index": index})
    return Case(root, "frame_index", [Expected("frame_index", 4, "frame_index", ((0, LENGTHS[4]),))],
                transcodes=False)


def _missing_rows(path: pathlib.Path, seed: int, clean: bool) -> Case:
    """The data file lacks the last 12 rows of the last episode (a recording cut short), which meta/episodes still
    gives its full length: rows missing for an episode of the table (orphans the other way round)."""
    root = _base(path, seed)
    last = len(LENGTHS) - 1
    case = Case(root, "orphan_rows", [Expected("orphan_rows", last, "episode_index", ((LENGTHS[last] - 12,
                                                                                        LENGTHS[last]),))],
                transcodes=False)
    if not clean:
        table = _read(root)
        cut = table.slice(0, table.num_rows - 12)
        with pq.ParquetWriter(root / DATA_FILE, cut.schema) as writer:
            writer.write_table(cut)
    return case


def _episode_index_repeated(path: pathlib.Path, seed: int, clean: bool) -> Case:
    """meta/episodes gives its row 3 the episode index 2 again (a copy-paste): index 2 repeated, 3 missing, and
    the data rows of episode 3 belong to no episode of the table."""
    root = _base(path, seed)
    start = sum(LENGTHS[:3])
    case = Case(root, "episode_index_gap", [Expected("episode_index_gap", None, "episode_index", ((2, 4),)),
                                            Expected("orphan_rows", None, "episode_index",
                                                     ((start, start + LENGTHS[3]),))],
                transcodes=False)
    if clean:
        return case
    _edit_episode_table(root, "episode_index", lambda numbers: np.where(np.arange(numbers.size) == 3, 2, numbers))
    return case


def _task_index(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = _base(path, seed)
    if not clean:
        table = _read(root)
        index = _column(table, "task_index")
        index[_rows(4)][12:14] = 7  # rows naming a task the task table does not have (2 tasks)
        _write(root, table, {"task_index": index}, restat=False)
    return Case(root, "task_index", [Expected("task_index", 4, "task_index", ((12, 14),))],
                also=frozenset({"stats_mismatch"}), transcodes=False)  # its stats were of the rows as they were


def _episode_index_gap(path: pathlib.Path, seed: int, clean: bool) -> Case:
    """Episode 3 deleted by hand (LeRobot's own layout otherwise intact): the later ones keep their numbers."""
    root = _base(path, seed)
    case = Case(root, "episode_index_gap", [Expected("episode_index_gap", None, "episode_index", ((3, 4),))],
                transcodes=False)
    if clean:
        return case
    table = _read(root)
    index = _column(table, "episode_index")
    index[index >= 3] += 1
    _write(root, table, {"episode_index": index}, restat=False)
    _edit_episode_table(root, "episode_index", lambda numbers: numbers + (numbers >= 3))
    return case


def _orphan_rows(path: pathlib.Path, seed: int, clean: bool) -> Case:
    """Rows of a seventh episode left in the data file after it was removed from meta/episodes."""
    root = _base(path, seed)
    n = sum(LENGTHS)
    case = Case(root, "orphan_rows", [Expected("orphan_rows", None, "episode_index", ((n, n + 8),))],
                transcodes=False)
    if clean:
        return case
    table = _read(root)
    tail = table.slice(n - 8, 8)
    extra = {name: _column(tail, name) for name in table.column_names if name in ("episode_index", "index",
                                                                                 "frame_index", "timestamp")}
    extra["episode_index"][:] = len(LENGTHS)
    extra["index"] = np.arange(n, n + 8)
    extra["frame_index"] = np.arange(8)
    extra["timestamp"] = (np.arange(8) / FPS).astype(np.float32)
    columns = {name: (pa.array(extra[name], type=table.schema.field(name).type) if name in extra
                      else tail.column(name)) for name in table.column_names}
    whole = pa.concat_tables([table, pa.table(columns, schema=table.schema)])
    with pq.ParquetWriter(root / DATA_FILE, whole.schema) as writer:
        writer.write_table(whole)
    return case


def _duplicate_episode(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = _base(path, seed)
    if not clean:
        table = _read(root)
        changes = {}
        for name in ("observation.state", "action"):
            values = _column(table, name)
            values[_rows(4)] = values[_rows(1)]  # episode 1 recorded a second time
            changes[name] = values
        _write(root, table, changes)
    return Case(root, "duplicate_episode", [Expected("duplicate_episode", 4, None, ((0, LENGTHS[4]),))])


def _dead_channel(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = _base(path, seed)
    if not clean:
        table = _read(root)
        action = _column(table, "action")
        action[:, 2] = 0.25  # a joint that never moves in any frame: unplugged, or not in this robot
        _write(root, table, {"action": action})
    return Case(root, "dead_channel", [Expected("dead_channel", None, "action")])


def _duplicate_task(path: pathlib.Path, seed: int, clean: bool) -> Case:
    tasks = ("pick the cube", "place the cube") if clean else ("pick the cube", "Pick the  cube ")
    root = _base(path, seed, tasks=tasks)
    return Case(root, "duplicate_task", [Expected("duplicate_task", None, "task")])


def _stats_mismatch(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = _base(path, seed)
    if not clean:
        stats = json.loads((root / "meta/stats.json").read_text())
        stats["observation.state"]["std"][2] *= 2.0  # a wrong std: normalisation off by 2x on that joint
        write_json(root / "meta/stats.json", stats)
    return Case(root, "stats_mismatch", [Expected("stats_mismatch", None, "observation.state")])


def _images(kind: str, edit: Callable[[np.ndarray], None], expected: list[Expected]
            ) -> Callable[[pathlib.Path, int, bool], Case]:
    """A dataset with an image feature, some of whose frames (of episode 2) ``edit`` changes."""
    def make(path: pathlib.Path, seed: int, clean: bool) -> Case:
        root = _base(path, seed, image_keys=[IMAGE])
        if not clean:
            table = _read(root)
            images = table.column(IMAGE).combine_chunks()
            frames = _decode_images(images)
            edit(frames[_rows(2)])
            column = pa.StructArray.from_arrays([pa.array(_encode_images(frames), pa.binary()),
                                                 images.field("path")], names=["bytes", "path"])
            _write(root, table, {IMAGE: column}, restat=False)
        return Case(root, kind, expected)
    return make


def _decode_images(column: pa.StructArray) -> np.ndarray:
    import io

    from PIL import Image

    return np.stack([np.asarray(Image.open(io.BytesIO(b))) for b in column.field("bytes").to_pylist()])


def _encode_images(frames: np.ndarray) -> list[bytes]:
    import io

    from PIL import Image

    out = []
    for frame in frames:
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


def _freeze(frames: np.ndarray) -> None:
    frames[5:40] = frames[5]  # the camera stalled: the same image for 35 frames (1.2 s)


def _black(frames: np.ndarray) -> None:
    frames[10:15] = 0


def _video(kind: str, expected: list[Expected], times: Callable[[int, int], list[float]] | None = None,
           edit: Callable[[int, np.ndarray], np.ndarray] | None = None, also: frozenset[str] = frozenset()
           ) -> Callable[[pathlib.Path, int, bool], Case]:
    """A dataset with an AV1 video camera whose file is written here (all episodes in one file, LeRobot's
    layout): ``edit(episode, frames)`` changes an episode's frames, ``times(episode, n)`` gives their times in
    seconds from the episode's start (default k / fps)."""
    def make(path: pathlib.Path, seed: int, clean: bool) -> Case:
        shape = (24, 32, 3)
        root = _base(path, seed, video_keys=[VIDEO], image_shape=shape)
        episodes = []
        for e, n in enumerate(LENGTHS):
            frames = camera_frames(0, e, n, shape, seed)
            stamps = [k / FPS for k in range(n)]
            if not clean:
                frames = edit(e, frames) if edit is not None else frames
                stamps = times(e, len(frames)) if times is not None else [k / FPS for k in range(len(frames))]
            episodes.append((frames, stamps))
        _write_video(root / f"videos/{VIDEO}/chunk-000/file-000.mp4", episodes)
        return Case(root, kind, expected, also=also)
    return make


def _write_video(path: pathlib.Path, episodes: Sequence[tuple[np.ndarray, Sequence[float]]]) -> None:
    """An AV1 mp4 of episodes one after the other, each starting where meta/episodes says (the sum of the earlier
    episodes' lengths / fps), each frame at its own time (a time base of 1/(4 fps), so frames can sit between
    the rows' times)."""
    import av

    from ..cameras.video import ENCODING, encoder_options
    from ..utils.sched import no_realtime

    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its banner and settings to stderr otherwise
    rate = Fraction(FPS)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(ENCODING["vcodec"], rate=rate)
        stream.width, stream.height = episodes[0][0].shape[2], episodes[0][0].shape[1]
        stream.pix_fmt = ENCODING["pix_fmt"]
        stream.time_base = Fraction(1, 4 * FPS)
        stream.codec_context.time_base = Fraction(1, 4 * FPS)
        # the encoder's own options, incl. the SVT-AV1 parameters the test suite sets (lp=1), as every other writer
        # of ours: without them the muxer refused a packet (EINVAL) in 4 loaded suite runs of 6 Dec
        stream.options = encoder_options(ENCODING)
        start, opened = 0, False
        for (frames, stamps), n in zip(episodes, LENGTHS, strict=True):
            for image, t in zip(frames, stamps, strict=True):
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
                frame.pts = round((start / FPS + t) * 4 * FPS)
                frame.time_base = Fraction(1, 4 * FPS)
                with contextlib.nullcontext() if opened else no_realtime():  # SVT-AV1 run by root: utils.sched
                    container.mux(stream.encode(frame))
                opened = True
            start += n
        container.mux(stream.encode(None))


def _video_short(e: int, frames: np.ndarray) -> np.ndarray:
    return frames[:-10] if e == 5 else frames  # the last episode's video stops 10 frames early


def _video_late(e: int, n: int) -> list[float]:
    # from frame 30 on, episode 2's frames sit half a frame late: no row's time has a frame within tolerance
    return [(k + (0.5 if e == 2 and k >= 30 else 0.0)) / FPS for k in range(n)]


def _video_extra_edit(e: int, frames: np.ndarray) -> np.ndarray:
    return np.concatenate([frames[:21], frames[20:21], frames[21:]]) if e == 2 else frames


def _video_extra(e: int, n: int) -> list[float]:
    # episode 2 holds one frame more than its rows: a frame between frames 20 and 21
    if e != 2:
        return [k / FPS for k in range(n)]
    return [k / FPS for k in range(21)] + [20.5 / FPS] + [k / FPS for k in range(21, n - 1)]


def _video_freeze(e: int, frames: np.ndarray) -> np.ndarray:
    if e == 2:
        frames = frames.copy()
        frames[5:40] = frames[5]  # the camera stalled for 35 frames: the encoder keeps them identical
    return frames


def _video_black(e: int, frames: np.ndarray) -> np.ndarray:
    if e == 1:
        frames = frames.copy()
        frames[10:15] = 0
    return frames


def _video_missing(path: pathlib.Path, seed: int, clean: bool) -> Case:
    root = write_sample_dataset(path, version="v2.1", n_episodes=len(LENGTHS), lengths=list(LENGTHS), fps=FPS,
                                seed=seed, video_keys=[VIDEO], write_videos=True)
    if not clean:
        (root / f"videos/chunk-000/{VIDEO}/episode_000004.mp4").unlink()
    return Case(root, "video_missing", [Expected("video_missing", 4, VIDEO, ((0, LENGTHS[4]),))])


#: kind -> the function writing its case: ``make(path, seed, clean)``
BATTERY: dict[str, Callable[[pathlib.Path, int, bool], Case]] = {
    "nan": _nan,
    "jump": _jump,
    "constant": _constant,
    "out_of_range": _out_of_range,
    "short_episode": _short,
    "empty_episode": _empty,
    "timestamp_drift": _timestamps("timestamp_drift", 2, _drift, [Expected("timestamp_drift", 2, "timestamp",
                                                                           ((2, LENGTHS[2]),))], True),
    "timestamp_gap": _timestamps("timestamp_gap", 1, _gap, [Expected("timestamp_gap", 1, "timestamp", ((20, 21),))],
                                 False),
    "timestamp_duplicate": _timestamps("timestamp_duplicate", 1, _duplicate,
                                       [Expected("timestamp_duplicate", 1, "timestamp", ((21, 22),)),
                                        Expected("timestamp_gap", 1, "timestamp", ((22, 23),))], False),
    "timestamp_backwards": _timestamps("timestamp_backwards", 4, _backwards,
                                       [Expected("timestamp_backwards", 4, "timestamp", ((31, 32),)),
                                        Expected("timestamp_gap", 4, "timestamp", ((30, 31), (32, 33)))], False),
    "frame_index": _frame_index,
    "frame_index_shifted": _frame_index_shifted,
    "index": _index,
    "episode_index": _episode_index,
    "task_index": _task_index,
    "episode_index_gap": _episode_index_gap,
    "orphan_rows": _orphan_rows,
    "missing_rows": _missing_rows,
    "episode_index_repeated": _episode_index_repeated,
    "duplicate_episode": _duplicate_episode,
    "duplicate_task": _duplicate_task,
    "dead_channel": _dead_channel,
    "stats_mismatch": _stats_mismatch,
    "frozen_frames": _images("frozen_frames", _freeze, [Expected("frozen_frames", 2, IMAGE, ((5, 40),))]),
    "black_frames": _images("black_frames", _black, [Expected("black_frames", 2, IMAGE, ((10, 15),))]),
    "video_frozen_frames": _video("frozen_frames", [Expected("frozen_frames", 2, VIDEO, ((5, 40),))],
                                  edit=_video_freeze),
    "video_black_frames": _video("black_frames", [Expected("black_frames", 1, VIDEO, ((10, 15),))],
                                 edit=_video_black),
    "video_short": _video("video_short", [Expected("video_short", 5, VIDEO, ((LENGTHS[5] - 10, LENGTHS[5]),))],
                          edit=_video_short),
    "video_timestamps": _video("video_timestamps", [Expected("video_timestamps", 2, VIDEO, ((30, LENGTHS[2]),))],
                               times=_video_late, also=frozenset({"video_extra_frames"})),
    "video_extra_frames": _video("video_extra_frames", [Expected("video_extra_frames", 2, VIDEO, ((20, 21),))],
                                 times=_video_extra, edit=_video_extra_edit),
    "video_missing": _video_missing,
}
VIDEO_CASES = frozenset(k for k in BATTERY if k.startswith("video_"))


def write_case(path: str | pathlib.Path, name: str, *, clean: bool = False, seed: int = 0) -> Case:
    """Write the battery's dataset ``name`` (a key of :data:`BATTERY`) into the empty or missing folder ``path``;
    ``clean``: the same dataset without the defect. Video cases need PyAV."""
    if name not in BATTERY:
        raise ValueError(f"no case {name!r} in the battery ({', '.join(BATTERY)})")
    return BATTERY[name](pathlib.Path(path), seed, clean)


def write_battery(root: str | pathlib.Path, names: Sequence[str] | None = None, *, seed: int = 0
                  ) -> dict[str, tuple[Case, Case]]:
    """Every case (or ``names``) and its clean twin, into ``root/<name>`` and ``root/<name>-clean``."""
    root = pathlib.Path(root)
    return {name: (write_case(root / name, name, seed=seed), write_case(root / f"{name}-clean", name, clean=True,
                                                                          seed=seed))
            for name in (names or list(BATTERY))}


if __name__ == "__main__":
    out = write_battery(sys.argv[1] if len(sys.argv) > 1 else "defect_battery")
    for name, (case, _) in out.items():
        print(f"{name:<22} {case.path}  expects {[(x.kind, x.episode, x.feature, x.frames) for x in case.expected]}")
