"""The columns of a LeRobot data file (Parquet) as numpy frames: the encodings LeRobot writes (``fixed_size_list``,
pandas-style ``list``, nested lists and ``datasets``' Array2D..Array5D extension columns, scalar columns, PNG/JPEG
image structs, 16-bit and float TIFF depth images, strings, language columns), checked against the declared features
(schema, list lengths, nulls, values that fit the dtype, images the declared size before they are decoded). Text
features become object arrays: a ``str`` per frame, a language column's value as JSON text."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa

from ..errors import CorruptSourceError, SchemaMismatchError
from .format import language_value
from .source_meta import FeatureSpec

__all__ = ["column_to_numpy", "frame_shape_from_arrow", "recorded_image_shape", "COLOUR_DEPTH_MODES"]


def _storage_type(typ: pa.DataType) -> pa.DataType:
    """An extension type's storage (``datasets`` registers Array2D..Array5D, Arrow knows ``json``): pyarrow gives
    the extension type where its class is registered, the storage where not."""
    while isinstance(typ, pa.BaseExtensionType):
        typ = typ.storage_type
    return typ


def _storage(arr: pa.Array) -> pa.Array:
    while isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    return arr


def _is_text(typ: pa.DataType) -> bool:
    return pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ) or (
        pa.types.is_dictionary(typ) and _is_text(typ.value_type))


def frame_shape_from_arrow(spec: FeatureSpec, typ: pa.DataType, path: str) -> tuple[int, ...]:
    """Per-frame shape of a column as stored: a plain column is a scalar, list nesting adds trailing axes (text
    features: one value per frame, shape ``()``)."""
    typ = _storage_type(typ)
    if spec.kind == "string":
        if not (_is_text(typ) or pa.types.is_null(typ)):
            raise SchemaMismatchError(f"{path}: string feature {spec.name!r} is {typ}, expected strings")
        return ()
    if spec.kind == "language":
        if not (pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_null(typ)):
            raise SchemaMismatchError(f"{path}: language feature {spec.name!r} is {typ}, expected lists of rows")
        return ()
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
    arr = _storage(arr)
    for size in shape:
        if arr.null_count:
            raise CorruptSourceError(f"{where}: feature {name!r} has null values")
        if pa.types.is_fixed_size_list(arr.type):
            if arr.type.list_size != size:
                raise SchemaMismatchError(
                    f"{where}: feature {name!r} has lists of size {arr.type.list_size}, declared {size}")
            first, stop = arr.offset * size, (arr.offset + len(arr)) * size
        else:  # offsets read from the buffer: pyarrow's value_lengths() and flatten() load pyarrow.compute
            offsets = np.frombuffer(arr.buffers()[1], np.int64 if pa.types.is_large_list(arr.type) else np.int32,
                                    len(arr) + 1, arr.offset * (8 if pa.types.is_large_list(arr.type) else 4))
            lengths = np.diff(offsets)
            bad = np.flatnonzero(lengths != size)
            if bad.size:
                raise SchemaMismatchError(f"{where}: feature {name!r} file row {first_row + int(bad[0]) // per_row} "
                                          f"has a list of {int(lengths[bad[0]])} values, declared {size}")
            first, stop = int(offsets[0]), int(offsets[-1])
        arr = _storage(arr.values.slice(first, stop - first))
        per_row *= size
    return arr


_NUMPY_TYPES = {pa.int8(): "int8", pa.int16(): "int16", pa.int32(): "int32", pa.int64(): "int64", pa.uint8(): "uint8",
                pa.uint16(): "uint16", pa.uint32(): "uint32", pa.uint64(): "uint64", pa.float16(): "float16",
                pa.float32(): "float32", pa.float64(): "float64"}


def _numbers(flat: pa.Array) -> np.ndarray:
    """A primitive array without nulls as numpy, read from its buffers (zero copy but for booleans): pyarrow's
    ``to_numpy`` imports pandas on its first call, ~0.2 s of a one-episode open."""
    if not len(flat):
        return np.empty(0, np.bool_ if pa.types.is_boolean(flat.type) else _NUMPY_TYPES[flat.type])
    if pa.types.is_boolean(flat.type):
        bits = np.frombuffer(flat.buffers()[1], np.uint8)
        return np.unpackbits(bits, count=flat.offset + len(flat), bitorder="little")[flat.offset:].astype(bool)
    dtype = np.dtype(_NUMPY_TYPES[flat.type])
    return np.frombuffer(flat.buffers()[1], dtype, len(flat), flat.offset * dtype.itemsize)


class _OtherSize(Exception):
    """An image whose header gives other dimensions than the feature declares (found before decoding it)."""


_DEPTH_MODES = {"I;16": np.dtype("uint16"), "I;16L": np.dtype("uint16"), "I;16B": np.dtype("uint16"),
                "F": np.dtype("float32")}  # PIL's modes of LeRobot's depth TIFFs (16-bit millimetres, float metres)


def _depth_pixels(img, spec: FeatureSpec) -> np.ndarray:
    """A depth image's pixels in the feature's stored dtype: uint16 millimetres stay uint16; float32 metres, or
    either of unknown unit, become float32 (exactly). Another mode, or float pixels for millimetres, is refused."""
    have = _DEPTH_MODES.get(img.mode)
    want = spec.numpy_dtype
    if have is None or (want == np.uint16 and have != want):
        raise _OtherSize(f"a {img.mode} image, where a depth map of {want} ({spec.depth_unit or 'unknown unit'}) is "
                         f"declared")
    return np.asarray(img).astype(want)


# 8-bit colour images, which LeRobot's writer also puts into a feature declared a depth map (its PNG path for 3-D
# frames does not look at is_depth_map); LeRobot then serves them as colour images (ToTensor: pixels / 255)
COLOUR_DEPTH_MODES = {"RGB": 3, "RGBA": 4}


def recorded_image_shape(col: pa.ChunkedArray, spec: FeatureSpec) -> tuple[tuple[int, ...], str | None]:
    """The frame shape an image feature's frames have, and their PIL mode, from the header of the column's first
    image: the declared shape, or the image's height and width where they are other but hold as many pixels
    (LeRobot serves the frames as recorded, whatever info.json declares; its own test fixtures write 96x64 images
    for a declared (64, 96, 3)); a depth map recorded as 8-bit colour images (:data:`COLOUR_DEPTH_MODES`) has their
    channels. Anything else keeps the declared shape, and decoding names the image that differs."""
    from PIL import Image

    if len(col) == 0 or len(spec.shape) != 3:
        return spec.shape, None
    raw = _storage(col.chunk(0) if col.num_chunks else col).field("bytes")[0].as_buffer()
    if raw is None:
        return spec.shape, None
    try:
        with Image.open(io.BytesIO(raw)) as img:  # the header only: nothing is decoded
            (width, height), mode = img.size, img.mode
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return spec.shape, None
    channels = COLOUR_DEPTH_MODES[mode] if spec.depth and mode in COLOUR_DEPTH_MODES else spec.shape[2]
    if (height, width) != spec.shape[:2] and height * width == spec.shape[0] * spec.shape[1]:
        return (height, width, channels), mode
    return (*spec.shape[:2], channels), mode


def _decode_images(col: pa.ChunkedArray, spec: FeatureSpec, where: str, first_row: int) -> np.ndarray:
    from PIL import Image

    shape = spec.frame_shape or spec.shape  # the recorded frames' shape (recorded_image_shape)
    out = np.empty((len(col), *shape), dtype=spec.numpy_dtype)
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[shape[-1]]
    row = 0
    for chunk in col.chunks:
        data = _storage(chunk).field("bytes")
        for value in data:
            raw = value.as_buffer()
            if raw is None:
                raise CorruptSourceError(f"{where}: image feature {spec.name!r} file row {first_row + row} has no "
                                         f"bytes")
            try:
                with Image.open(io.BytesIO(raw)) as img:
                    if img.size != (shape[1], shape[0]):  # checked before decoding: no bomb is inflated
                        raise _OtherSize(f"{img.size[1]}x{img.size[0]} pixels")
                    pixels = _depth_pixels(img, spec) if spec.depth else np.asarray(
                        img if img.mode == mode else img.convert(mode))
            except _OtherSize as exc:
                raise SchemaMismatchError(
                    f"{where}: image feature {spec.name!r} file row {first_row + row} is {exc}, declared "
                    f"{spec.shape}{'' if shape == spec.shape else f' (its first frame: {shape})'} (not decoded)"
                ) from None
            except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
                raise CorruptSourceError(
                    f"{where}: image feature {spec.name!r} file row {first_row + row} cannot be decoded "
                    f"({exc})") from exc
            pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], -1)
            if pixels.shape != shape:
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
    if spec.kind in ("string", "language"):
        return _text(col, spec, where, first_row)
    want = spec.numpy_dtype
    parts = []
    for chunk in col.chunks:
        flat = _flatten_lists(chunk, spec.frame_shape, spec.name, where, first_row)
        first_row += len(chunk)
        if flat.null_count:
            raise CorruptSourceError(f"{where}: feature {spec.name!r} has null values")
        if not (pa.types.is_integer(flat.type) or pa.types.is_floating(flat.type) or pa.types.is_boolean(flat.type)):
            raise SchemaMismatchError(f"{where}: feature {spec.name!r} holds {flat.type}, declared {spec.dtype}")
        values = _numbers(flat)
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


def _text(col: pa.ChunkedArray, spec: FeatureSpec, where: str, first_row: int) -> np.ndarray:
    """A string column as ``str`` per frame; a language column's values (as LeRobot returns them) as JSON text."""
    values = [v for chunk in col.chunks for v in _storage(chunk).to_pylist()]
    out = np.empty(len(values), dtype=object)
    for row, value in enumerate(values):
        if spec.kind == "string":
            if not isinstance(value, str):
                raise CorruptSourceError(f"{where}: string feature {spec.name!r} file row {first_row + row} is "
                                         f"{value!r:.40}, not a string")
            out[row] = value
            continue
        try:
            out[row] = json.dumps(language_value(spec.name, value), ensure_ascii=False, separators=(",", ":"))
        except (ValueError, TypeError) as exc:
            raise CorruptSourceError(f"{where}: language feature {spec.name!r} file row {first_row + row} cannot be "
                                     f"read ({exc})") from None
    return out
