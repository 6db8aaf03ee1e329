"""The zarr v3 metadata documents of a store (``zarr.json`` of the root group and of each array).

Written by hand rather than through zarr-python, whose writes start an event-loop thread in the caller's process
(which then warns on fork, as DataLoader workers do); the tests check that zarr and xarray read what we write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from .tables import ArraySpec, PackLayout
from .text import TEXT_CODEC, TEXT_DATA_TYPE

__all__ = ["ROOT", "LIVE_ARRAY", "EPISODE_ARRAYS", "metadata_documents", "dump"]

ROOT = "zarr.json"
LIVE_ARRAY = "frame_live"
EPISODE_ARRAYS = ("episode_start", "episode_end", "episode_length", "episode_task_index", "episode_chunk",
                  "episode_offset", "episode_frame")


def dump(doc: dict) -> bytes:
    # NaN/Infinity in LeRobot stats are kept as Python's json (and zarr-python) read them
    return json.dumps(doc, separators=(",", ":")).encode()


def run_length(values: list[int]) -> list:
    """zarr's rectilinear edge list: runs of two or more equal sizes become ``[size, count]``."""
    out: list = []
    for v in values:
        if out and isinstance(out[-1], list) and out[-1][0] == v:
            out[-1][1] += 1
        elif out and not isinstance(out[-1], list) and out[-1] == v:
            out[-1] = [v, 2]
        else:
            out.append(v)
    return out


def _bytes_codec(dtype: np.dtype) -> dict:
    codec: dict = {"name": "bytes"}
    if dtype.itemsize > 1:
        codec["configuration"] = {"endian": "little"}
    return codec


def _codecs(spec: ArraySpec) -> list[dict]:
    """Raw: the bytes codec alone (chunk files are the array bytes). Compact: a shard per pack whose inner chunks
    are single frames encoded with the array's frame codec, the shard index at ``spec.shard_index``."""
    if spec.storage == "raw":
        return [_bytes_codec(spec.dtype)]
    if spec.is_text:
        inner = [{"name": TEXT_CODEC, "configuration": {}}]
    else:
        from ..cameras.frame_codecs import frame_codec

        inner = frame_codec(spec.codec_spec, spec.frame_shape).zarr_codecs()
    return [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [1, *spec.frame_shape], "codecs": inner,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": spec.shard_index}}]


def _array_doc(shape: tuple[int, ...], dtype: np.dtype, grid: dict, dims: list[str], codecs: list[dict],
               attributes: dict | None = None, fill: Any = None) -> dict:
    text = dtype.kind == "O"  # a text array (zarr's variable-length strings)
    if fill is None:
        fill = "" if text else False if dtype.kind == "b" else 0.0 if dtype.kind == "f" else 0
    return {"shape": list(shape), "data_type": TEXT_DATA_TYPE if text else dtype.name, "chunk_grid": grid,
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "codecs": codecs, "attributes": attributes or {}, "dimension_names": dims,
            "zarr_format": 3, "node_type": "array", "storage_transformers": []}


def _frame_grid(sizes: np.ndarray, frame_shape: tuple[int, ...]) -> dict:
    if not len(sizes):  # no pack yet: a rectilinear grid needs at least one edge
        return {"name": "regular", "configuration": {"chunk_shape": [1, *frame_shape]}}
    return {"name": "rectilinear",
            "configuration": {"kind": "inline",
                              "chunk_shapes": [run_length(sizes.tolist()), *([s] for s in frame_shape)]}}


def metadata_documents(arrays: Mapping[str, ArraySpec], packs: PackLayout, n_episodes: int,
                       attributes: Mapping[str, Any] | None) -> dict[str, dict]:
    """Every ``zarr.json`` of a store of these ``arrays``, ``packs`` and ``n_episodes`` episodes, keyed by path
    relative to the store. The root's holds ``attributes`` (the root state) and the consolidated metadata of every
    array; without ``attributes`` the root is left out."""
    sizes = packs.zarr_sizes()
    total = int(sizes.sum())
    docs: dict[str, dict] = {}
    for name, spec in arrays.items():
        if spec.storage == "mp4":  # kept as the source's mp4 files, outside the zarr hierarchy
            continue
        docs[name] = _array_doc((total, *spec.frame_shape), spec.dtype, _frame_grid(sizes, spec.frame_shape),
                                ["frame", *(f"{name}.{d}" for d in spec.dims)], _codecs(spec),
                                {"coordinates": LIVE_ARRAY})
    docs[LIVE_ARRAY] = _array_doc((total,), np.dtype(bool), _frame_grid(sizes, ()), ["frame"],
                                  [_bytes_codec(np.dtype(bool))])
    grid = {"name": "regular", "configuration": {"chunk_shape": [max(n_episodes, 1)]}}
    for name in EPISODE_ARRAYS:
        docs[name] = _array_doc((n_episodes,), np.dtype("int64"), grid, ["episode"], [_bytes_codec(np.dtype("<i8"))])
    out = {f"{name}/{ROOT}": doc for name, doc in docs.items()}
    if attributes is not None:
        out[ROOT] = {"attributes": dict(attributes), "zarr_format": 3, "node_type": "group",
                     "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": docs}}
    return out
