"""The columns of a LeRobot data file (Parquet) as numpy frames: the encodings LeRobot writes (``fixed_size_list``,
pandas-style ``list``, nested lists, scalar columns, PNG/JPEG image structs), checked against the declared features
(schema, list lengths, nulls, values that fit the dtype, images the declared size before they are decoded)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa

from ..errors import CorruptSourceError, SchemaMismatchError
from .source_meta import FeatureSpec

__all__ = ["column_to_numpy", "frame_shape_from_arrow"]


def frame_shape_from_arrow(spec: FeatureSpec, typ: pa.DataType, path: str) -> tuple[int, ...]:
    """Per-frame shape of a column as stored: a plain column is a scalar, list nesting adds trailing axes."""
    if spec.kind == "image":
        if not (pa.types.is_struct(typ) and typ.get_field_index("bytes") >= 0):
            raise SchemaMismatchError(f"{path}: image feature {spec.name!r} is {typ}, expected struct<bytes, path>")
        return spec.shape
    depth = 0
    while pa.types.is_list(typ) or pa.types.is_fixed_size_list(typ) or pa.types.is_large_list(typ):
        if (pa.types.is_fixed_size_list(typ) and depth < len(spec.shape)
                and typ.list_size != spec.shape[depth]):
            raise SchemaMismatchError(f"{path}: feature {spec.name!r} holds lists of size {typ.list_size} on axis "
                                      f"{depth}, declared shape {spec.shape}")
        typ = typ.value_type
        depth += 1
    if depth == 0:
        if spec.shape not in ((1,), ()):
            raise SchemaMismatchError(f"{path}: feature {spec.name!r} declares shape {spec.shape} but is a scalar "
                                      f"column")
        return ()
    if depth == 1 and len(spec.shape) > 1:
        raise SchemaMismatchError(f"{path}: feature {spec.name!r} declares shape {spec.shape} but is a flat list")
    if depth != len(spec.shape):
        raise SchemaMismatchError(
            f"{path}: feature {spec.name!r} declares shape {spec.shape} but the column nests {depth} list level(s)")
    return spec.shape


def _flatten_lists(arr: pa.Array, shape: tuple[int, ...], name: str, where: str, first_row: int) -> pa.Array:
    """Flatten nested (fixed size or variable) lists, checking every list has the declared length."""
    per_row = 1
    for size in shape:
        if arr.null_count:
            raise CorruptSourceError(f"{where}: feature {name!r} has null values")
        if pa.types.is_fixed_size_list(arr.type):
            if arr.type.list_size != size:
                raise SchemaMismatchError(
                    f"{where}: feature {name!r} has lists of size {arr.type.list_size}, declared {size}")
        else:
            lengths = arr.value_lengths().to_numpy(zero_copy_only=False)
            bad = np.flatnonzero(lengths != size)
            if bad.size:
                raise SchemaMismatchError(f"{where}: feature {name!r} file row {first_row + int(bad[0]) // per_row} "
                                          f"has a list of {int(lengths[bad[0]])} values, declared {size}")
        arr = arr.flatten()
        per_row *= size
    return arr


class _OtherSize(Exception):
    """An image whose header gives other dimensions than the feature declares (found before decoding it)."""


def _decode_images(col: pa.ChunkedArray, spec: FeatureSpec, where: str, first_row: int) -> np.ndarray:
    from PIL import Image

    out = np.empty((len(col), *spec.shape), dtype=np.uint8)
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[spec.shape[-1]]
    row = 0
    for chunk in col.chunks:
        data = chunk.field("bytes")
        for value in data:
            raw = value.as_buffer()
            if raw is None:
                raise CorruptSourceError(f"{where}: image feature {spec.name!r} file row {first_row + row} has no "
                                         f"bytes")
            try:
                with Image.open(io.BytesIO(raw)) as img:
                    if img.size != (spec.shape[1], spec.shape[0]):  # checked before decoding: no bomb is inflated
                        raise _OtherSize(f"{img.size[1]}x{img.size[0]} pixels")
                    pixels = np.asarray(img if img.mode == mode else img.convert(mode))
            except _OtherSize as exc:
                raise SchemaMismatchError(
                    f"{where}: image feature {spec.name!r} file row {first_row + row} is {exc}, declared "
                    f"{spec.shape} (not decoded)") from None
            except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
                raise CorruptSourceError(
                    f"{where}: image feature {spec.name!r} file row {first_row + row} cannot be decoded "
                    f"({exc})") from exc
            pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], -1)
            if pixels.shape != spec.shape:
                raise SchemaMismatchError(
                    f"{where}: image feature {spec.name!r} file row {first_row + row} is {pixels.shape}, "
                    f"declared {spec.shape}")
            out[row] = pixels
            row += 1
    return out


def column_to_numpy(col: pa.ChunkedArray, spec: FeatureSpec, where: str, first_row: int = 0) -> np.ndarray:
    """Convert one parquet column to a (frames, *frame_shape) array of the feature's dtype, zero-copy if possible.

    ``where`` (file and episode) and ``first_row`` (file row of the column's first value) locate errors.
    """
    if spec.kind == "image":
        return _decode_images(col, spec, where, first_row)
    want = spec.numpy_dtype
    parts = []
    for chunk in col.chunks:
        flat = _flatten_lists(chunk, spec.frame_shape, spec.name, where, first_row)
        first_row += len(chunk)
        if flat.null_count:
            raise CorruptSourceError(f"{where}: feature {spec.name!r} has null values")
        if not (pa.types.is_integer(flat.type) or pa.types.is_floating(flat.type) or pa.types.is_boolean(flat.type)):
            raise SchemaMismatchError(f"{where}: feature {spec.name!r} holds {flat.type}, declared {spec.dtype}")
        values = flat.to_numpy(zero_copy_only=False)
        if values.dtype != want:
            cast = values.astype(want)
            if not np.array_equal(cast.astype(values.dtype), values, equal_nan=values.dtype.kind == "f"):
                raise SchemaMismatchError(
                    f"{where}: feature {spec.name!r} holds {values.dtype} values that do not fit the declared {want}")
            values = cast
        parts.append(values.reshape(-1, *spec.frame_shape))
    if not parts:
        return np.empty((0, *spec.frame_shape), dtype=want)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
