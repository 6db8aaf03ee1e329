"""The files of a LeRobot dataset, one writer each: what :mod:`lerobot_zarr.writing.export` (a store back to LeRobot's
v3.0 format) and :mod:`lerobot_zarr.testing.sample_data` (synthetic datasets) both write, so that their files agree byte
for byte with LeRobot's and with each other's.

v3.0: ``data/chunk-CCC/file-FFF.parquet`` (:class:`DataFiles`), ``meta/episodes/chunk-000/file-000.parquet``
(:func:`write_episodes_table`), ``meta/tasks.parquet`` (:func:`write_tasks`), ``meta/stats.json``
(:func:`write_stats`), ``meta/info.json`` (:func:`write_info`) and the dataset card ``README.md``
(:func:`write_card`); v2.1's jsonl files are written only by ``sample_data``. Also the parquet encodings they use
(nested lists, the ``huggingface`` and ``pandas`` schema metadata), in plain pyarrow (no pandas): pandas' schema
metadata is written by hand so that pandas, and so LeRobot, reads ``meta/tasks.parquet`` with its index. The
format's constants, ``features`` entries and statistics are in :mod:`lerobot_zarr.lerobot.format` (no pyarrow).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .format import (
    CHUNKS_SIZE,
    LANGUAGE_EVENTS,
    LANGUAGE_PERSISTENT,
    V3_DATA_PATH,
    V3_VIDEO_PATH,
    aggregate_stats,
    data_file_rel,
    stats_json,
)

__all__ = ["EPISODES_FILE", "nested_list", "language_column", "huggingface_metadata", "pandas_metadata", "write_json",
           "DataFiles",
           "write_episodes_table", "write_tasks", "write_stats", "write_info", "write_card"]

EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"  # one file holds the whole episode table
# pandas version recorded in the pandas schema metadata, as in real LeRobot files.
PANDAS_VERSION = "2.3.3"


def nested_list(values: np.ndarray, fixed: bool) -> pa.Array:
    """Rows of ``values`` (shape (n, d1, d2, ...)) as nested fixed-size or variable-size arrow lists."""
    array = pa.array(values.reshape(-1))
    for size in reversed(values.shape[1:]):
        if fixed:
            array = pa.FixedSizeListArray.from_arrays(array, size)
        else:
            offsets = pa.array(np.arange(0, len(array) + 1, size, dtype=np.int32))
            array = pa.ListArray.from_arrays(offsets, array)
    return array


def _numpy_name(arrow_type: pa.DataType) -> str:
    """``arrow_type.to_pandas_dtype().__name__`` without pandas (which pyarrow < 26 imports for it)."""
    return pa.array([], type=arrow_type).to_numpy(zero_copy_only=False).dtype.type.__name__


def huggingface_metadata(schema: pa.Schema, version: str) -> str:
    """The ``huggingface`` schema metadata of the `datasets` library, as lerobot's files carry it."""
    list_type = "List" if version == "v3.0" else "Sequence"

    def feature(arrow_type: pa.DataType) -> dict:
        if pa.types.is_fixed_size_list(arrow_type):
            return {"feature": feature(arrow_type.value_type), "length": arrow_type.list_size, "_type": list_type}
        if pa.types.is_list(arrow_type):
            return {"feature": feature(arrow_type.value_type), "_type": list_type}
        if pa.types.is_struct(arrow_type):
            if {arrow_type.field(i).name for i in range(arrow_type.num_fields)} == {"bytes", "path"}:
                return {"_type": "Image"}
            return {arrow_type.field(i).name: feature(arrow_type.field(i).type) for i in range(arrow_type.num_fields)}
        if pa.types.is_string(arrow_type):
            return {"dtype": "string", "_type": "Value"}
        return {"dtype": _numpy_name(arrow_type), "_type": "Value"}

    return json.dumps({"info": {"features": {field.name: feature(field.type) for field in schema}}})


def _row_type(timestamp: bool) -> pa.StructType:
    """A language column's row, as LeRobot declares it; ``tool_calls`` as JSON text (LeRobot's ``Json`` values)."""
    return pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string()), pa.field("style", pa.string()),
                      *([pa.field("timestamp", pa.float32())] if timestamp else []), pa.field("camera", pa.string()),
                      pa.field("tool_calls", pa.list_(pa.string()))])


_LANGUAGE_TYPES = {LANGUAGE_PERSISTENT: pa.list_(_row_type(True)), LANGUAGE_EVENTS: pa.list_(_row_type(False))}


def language_column(name: str, values: Sequence) -> pa.Array:
    """A language column from its frames' values (lists of row dicts, or None), typed as LeRobot declares its two
    columns (the same type in every file, whatever the values); a column of another name as Arrow infers it."""
    typ = _LANGUAGE_TYPES.get(name)
    if typ is None:
        return pa.array(list(values))

    def row(r: dict | None) -> dict | None:
        if r is None or r.get("tool_calls") is None:
            return r
        return {**r, "tool_calls": [json.dumps(c, ensure_ascii=False) for c in r["tool_calls"]]}

    return pa.array([None if v is None else [row(r) for r in v] for v in values], typ)


def pandas_metadata(schema: pa.Schema, index_column: str | None) -> str:
    """The ``pandas`` schema metadata pandas writes, with ``index_column`` (the last column) as a named index."""

    def pandas_type(arrow_type: pa.DataType) -> str:
        if pa.types.is_string(arrow_type):
            return "unicode"
        if pa.types.is_list(arrow_type):
            return f"list[{pandas_type(arrow_type.value_type)}]"
        if pa.types.is_struct(arrow_type):
            return "object"
        return _numpy_name(arrow_type)

    def numpy_type(arrow_type: pa.DataType) -> str:
        if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
            return _numpy_name(arrow_type)
        return "object"

    columns = [
        {
            "name": field.name,
            "field_name": field.name,
            "pandas_type": pandas_type(field.type),
            "numpy_type": numpy_type(field.type),
            "metadata": None,
        }
        for field in schema
    ]
    column_indexes = []
    if index_column is not None:
        column_indexes = [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ]
    return json.dumps(
        {
            "index_columns": [] if index_column is None else [index_column],
            "column_indexes": column_indexes,
            "columns": columns,
            "attributes": {},
            "creator": {"library": "pyarrow", "version": pa.__version__},
            "pandas_version": PANDAS_VERSION,
        }
    )


def write_json(file: pathlib.Path, content: dict) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(content, indent=4, ensure_ascii=False), encoding="utf-8")


class DataFiles:
    """v3.0 data files written one after the other, one row group per :meth:`add`. The caller decides when a file
    is full (:meth:`size` tells how big the current one is so far) and starts the next with :meth:`new_file`."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.number = -1
        self.rel = ""
        self.rows = 0  # rows written to the current file
        self._writer: pq.ParquetWriter | None = None
        self._metadata: dict | None = None

    @property
    def place(self) -> tuple[int, int]:
        """``(chunk_index, file_index)`` of the current file."""
        return divmod(self.number, CHUNKS_SIZE)

    def new_file(self) -> None:
        """Close the current file; the next :meth:`add` opens the next one."""
        self.close()
        self.number += 1
        self.rel = data_file_rel(self.number)
        self.rows = 0

    def size(self) -> int:
        return (self.root / self.rel).stat().st_size if self._writer is not None else 0

    def add(self, table: pa.Table) -> None:
        """Append ``table`` as one row group; the file's first table sets its schema and schema metadata."""
        if self._writer is None:
            path = self.root / self.rel
            path.parent.mkdir(parents=True, exist_ok=True)
            self._metadata = table.schema.metadata
            self._writer = pq.ParquetWriter(path, table.schema, compression="snappy")
        self._writer.write_table(table.replace_schema_metadata(self._metadata), row_group_size=max(len(table), 1))
        self.rows += len(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def write_episodes_table(root: pathlib.Path, *, tasks: Sequence[Sequence[str]] | None, lengths: np.ndarray,
                         data_files: tuple[Sequence[int], Sequence[int]],
                         videos: Mapping[str, tuple[Sequence[int], Sequence[int], Sequence[float], Sequence[float]]],
                         stats: Mapping[str, Mapping[str, np.ndarray]], row_group_size: int | None = None) -> None:
    """``meta/episodes``: per episode (0 .. n - 1) its ``tasks``, length and frame range, its data file
    (``data_files``: chunk and file indices), per video key its file and time range (``videos``: chunk, file,
    from and to timestamps) and per feature its ``stats`` (arrays of shape (n, ...)). One row group, or row groups
    of ``row_group_size`` episodes (LeRobot's recorder flushes its metadata buffer every 10 episodes). ``tasks``
    None: no ``tasks`` column (as LeRobot's ``convert_image_to_video_dataset`` writes the table)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n_episodes = len(lengths)
    starts = np.cumsum(lengths) - lengths
    columns: dict[str, pa.Array] = {
        "episode_index": pa.array(np.arange(n_episodes, dtype=np.int64)),
        **({} if tasks is None else {"tasks": pa.array([list(t) for t in tasks], pa.list_(pa.string()))}),
        "length": pa.array(lengths),
        "data/chunk_index": pa.array(np.asarray(data_files[0], dtype=np.int64)),
        "data/file_index": pa.array(np.asarray(data_files[1], dtype=np.int64)),
        "dataset_from_index": pa.array(starts),
        "dataset_to_index": pa.array(starts + lengths),
    }
    for key, place in videos.items():
        for name, values, dtype in zip(("chunk_index", "file_index", "from_timestamp", "to_timestamp"), place,
                                       (np.int64, np.int64, np.float64, np.float64), strict=True):
            columns[f"videos/{key}/{name}"] = pa.array(np.asarray(values, dtype=dtype))
    for key, feature_stats in stats.items():
        for name, values in feature_stats.items():
            columns[f"stats/{key}/{name}"] = nested_list(
                values.astype(np.float64) if values.dtype.kind == "f" else values.astype(np.int64), fixed=False)
    zeros = pa.array(np.zeros(n_episodes, dtype=np.int64))
    columns["meta/episodes/chunk_index"] = zeros
    columns["meta/episodes/file_index"] = zeros
    (root / EPISODES_FILE).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), root / EPISODES_FILE, compression="snappy",
                   row_group_size=row_group_size or max(n_episodes, 1))


def write_tasks(root: pathlib.Path, tasks: Sequence[str]) -> None:
    """``meta/tasks.parquet`` as pandas writes ``DataFrame({"task_index": ...}, index=Index(tasks, name="task"))``."""
    table = pa.table({"task_index": pa.array(np.arange(len(tasks), dtype=np.int64)),
                      "task": pa.array(list(tasks))})
    table = table.replace_schema_metadata({"pandas": pandas_metadata(table.schema, index_column="task")})
    (root / "meta").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / "meta/tasks.parquet")


def write_stats(root: pathlib.Path, stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
    """``meta/stats.json``: the dataset stats merged from per-episode ``stats`` (per feature, arrays of shape
    (n_episodes, ...)); returns what it wrote."""
    content = {key: stats_json(aggregate_stats(feature_stats)) for key, feature_stats in stats.items()}
    write_json(root / "meta/stats.json", content)
    return content


def write_info(root: pathlib.Path, *, robot_type: str | None, lengths: np.ndarray, total_tasks: int, fps: float,
               features: dict, data_files_size_in_mb: int, video_files_size_in_mb: int, extra: dict | None = None
               ) -> dict:
    """``meta/info.json`` of a v3.0 dataset of episodes of ``lengths`` (and the ``extra`` keys, such as the
    ``tools`` ``lerobot-annotate`` declares); returns what it wrote."""
    n_episodes = len(lengths)
    info = {
        "codebase_version": "v3.0",
        "robot_type": robot_type,
        "total_episodes": n_episodes,
        "total_frames": int(np.sum(lengths)),
        "total_tasks": total_tasks,
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": data_files_size_in_mb,
        "video_files_size_in_mb": video_files_size_in_mb,
        "fps": fps,
        "splits": {"train": f"0:{n_episodes}"},
        "data_path": V3_DATA_PATH,
        "video_path": V3_VIDEO_PATH if any(f["dtype"] == "video" for f in features.values()) else None,
        "features": features,
        **(extra or {}),
    }
    write_json(root / "meta/info.json", info)
    return info


def write_card(root: pathlib.Path, info: dict, card: Mapping[str, Any] | None = None) -> None:
    """The dataset card ``README.md``, as LeRobot writes it (the Hub reads its YAML header). ``card``: the fields of
    LeRobot's card template (``tags`` added to "LeRobot", ``license`` (None: none), ``repo_id``,
    ``dataset_description``, ``url``, ``paper``, ``citation_bibtex``), as ``push_to_hub`` gives them."""
    structure = f"[meta/info.json](meta/info.json):\n```json\n{json.dumps(info, indent=4)}\n```\n"
    if card is not None and card.get("template_path") is not None:
        (root / "README.md").write_text(_templated_card(structure, card), encoding="utf-8")
        return
    if card is None:
        (root / "README.md").write_text(
            "---\nlicense: apache-2.0\ntask_categories:\n- robotics\ntags:\n- LeRobot\nconfigs:\n- config_name: "
            "default\n  data_files: data/*/*.parquet\n---\n\n"
            "This dataset uses the [LeRobot](https://github.com/huggingface/lerobot) v3.0 format. It was written by "
            f"lerobot_zarr from a local store.\n\n## Dataset structure\n\n{structure}", encoding="utf-8")
        return
    header = {"license": card.get("license"), "task_categories": ["robotics"],
              "tags": ["LeRobot", *(card.get("tags") or [])],
              "configs": [{"config_name": "default", "data_files": "data/*/*.parquet"}]}
    header = {k: v for k, v in header.items() if v is not None}
    more = "[More Information Needed]"
    repo_id = card.get("repo_id")
    badge = (f'<a class="flex" href="https://huggingface.co/spaces/lerobot/visualize_dataset?path={repo_id}">\n'
             '<img class="block dark:hidden" src="https://huggingface.co/datasets/huggingface/badges/resolve/main/'
             'visualize-this-dataset-xl.svg"/>\n<img class="hidden dark:block" src="https://huggingface.co/datasets/'
             'huggingface/badges/resolve/main/visualize-this-dataset-xl-dark.svg"/>\n</a>\n\n') if repo_id else ""
    (root / "README.md").write_text(
        f"---\n{_yaml(header)}---\n\nThis dataset was created using [LeRobot](https://github.com/huggingface/lerobot)."
        f"\n\n{badge}## Dataset Description\n\n{card.get('dataset_description') or ''}\n\n"
        f"- **Homepage:** {card.get('url') or more}\n- **Paper:** {card.get('paper') or more}\n"
        f"- **License:** {card.get('license') or more}\n\n## Dataset Structure\n\n{structure}\n## Citation\n\n"
        f"**BibTeX:**\n\n```bibtex\n{card.get('citation_bibtex') or more}\n```\n", encoding="utf-8")


def _templated_card(structure: str, card: Mapping[str, Any]) -> str:
    """The dataset card rendered from the Jinja template at ``card["template_path"]`` as LeRobot renders it
    (``create_lerobot_dataset_card``: huggingface_hub's ``DatasetCard.from_template`` with LeRobot's card data and
    every other field of ``card``; the template sees ``dataset_structure`` too, LeRobot's: one given is replaced)."""
    from huggingface_hub import DatasetCard, DatasetCardData

    fields = {k: v for k, v in card.items() if k != "tags"}
    data = DatasetCardData(license=fields.get("license"), tags=["LeRobot", *(card.get("tags") or [])],
                           task_categories=["robotics"],
                           configs=[{"config_name": "default", "data_files": "data/*/*.parquet"}])
    return str(DatasetCard.from_template(card_data=data, **{**fields, "dataset_structure": structure}))


def _yaml(value: Any, indent: str = "") -> str:
    """The card's YAML header (mappings, lists, strings: JSON-quoted where YAML could read them otherwise)."""
    out = []
    for key, v in value.items():
        if isinstance(v, list):
            out.append(f"{indent}{key}:\n")
            for item in v:
                if isinstance(item, dict):
                    first, *rest = _yaml(item, indent + "  ").splitlines(keepends=True)
                    out.append(f"{indent}- {first.lstrip()}{''.join(rest)}")
                else:
                    out.append(f"{indent}- {_scalar(item)}\n")
        else:
            out.append(f"{indent}{key}: {_scalar(v)}\n")
    return "".join(out)


def _scalar(value: Any) -> str:
    text = str(value)
    plain = text and text.replace("-", "").replace("_", "").replace(".", "").replace("/", "").replace("*", "x") \
        .isalnum() and text[0] not in "-*" and text.lower() not in ("true", "false", "null", "yes", "no", "on", "off")
    return text if plain else json.dumps(text)
