"""zarr-python v3 codec classes for lerobot_zarr's frame codecs (imports zarr; see
:mod:`lerobot_zarr.cameras.frame_codecs`).

``lerobot_zarr.delta`` (array -> array): differences along ``axis`` of the chunk, the first slice kept, modulo
the integer type. Configuration ``{"axis": int}``. With one frame ``(1, H, W, C)`` per inner chunk, axis 1
differences each pixel row with the row above.

``lerobot_zarr.jpeg`` (array -> bytes): the chunk, ``(1, ..., 1, H, W, C)`` uint8 with C 1 or 3, as one JPEG
(JFIF) image. Configuration ``{"quality": 1..100, "subsampling": "444"|"422"|"420"}`` (used when encoding;
decoding reads any baseline JPEG).

Both decode with the very functions the sampler uses, so zarr and lerobot_zarr return the same pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec
from zarr.core.common import parse_named_configuration

from .frame_codecs import DELTA_CODEC, JPEG_CODEC, JpegFrames, delta_rows, undelta_rows

if TYPE_CHECKING:
    from typing import Self

    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer


@dataclass(frozen=True)
class DeltaCodec(ArrayArrayCodec):
    """Differences along one axis of the chunk (lossless for integer data)."""

    is_fixed_size = True
    axis: int

    def __init__(self, *, axis: int) -> None:
        if not isinstance(axis, int) or isinstance(axis, bool) or axis < 0:
            raise ValueError(f"{DELTA_CODEC}: axis must be a non-negative integer, got {axis!r}")
        object.__setattr__(self, "axis", axis)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        _, config = parse_named_configuration(data, DELTA_CODEC)
        return cls(**config)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {"name": DELTA_CODEC, "configuration": {"axis": self.axis}}

    def validate(self, shape: tuple[int, ...], dtype: Any, chunk_grid: Any) -> None:
        if self.axis >= len(shape):
            raise ValueError(f"{DELTA_CODEC}: axis {self.axis} of an array with {len(shape)} dimensions")
        kind = np.dtype(dtype.to_native_dtype()).kind
        if kind not in "ui":
            raise ValueError(f"{DELTA_CODEC}: integer data only, got {dtype}")

    def resolve_metadata(self, chunk_spec: ArraySpec) -> ArraySpec:
        return chunk_spec

    def _decode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        data = np.array(chunk_array.as_numpy_array(), copy=True)
        return chunk_spec.prototype.nd_buffer.from_numpy_array(undelta_rows(data, self.axis))

    async def _decode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._decode_sync(chunk_array, chunk_spec)

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer | None:
        data = delta_rows(chunk_array.as_numpy_array(), self.axis)
        return chunk_spec.prototype.nd_buffer.from_numpy_array(np.ascontiguousarray(data))

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> NDBuffer | None:
        return self._encode_sync(chunk_array, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        return input_byte_length


def _image_shape(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) < 3 or any(s != 1 for s in shape[:-3]) or shape[-1] not in (1, 3):
        raise ValueError(f"{JPEG_CODEC}: chunks must be (1, ..., height, width, 1 or 3 channels), got {shape}")
    return shape[-3], shape[-2], shape[-1]


@dataclass(frozen=True)
class JpegCodec(ArrayBytesCodec):
    """One JPEG image per chunk (uint8, gray or RGB)."""

    is_fixed_size = False
    quality: int
    subsampling: str

    def __init__(self, *, quality: int = 90, subsampling: str = "420") -> None:
        JpegFrames((8, 8, 3), quality=quality, subsampling=subsampling)  # checks the options
        object.__setattr__(self, "quality", quality)
        object.__setattr__(self, "subsampling", subsampling)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        _, config = parse_named_configuration(data, JPEG_CODEC, require_configuration=False)
        return cls(**(config or {}))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {"name": JPEG_CODEC, "configuration": {"quality": self.quality, "subsampling": self.subsampling}}

    def validate(self, shape: tuple[int, ...], dtype: Any, chunk_grid: Any) -> None:
        if np.dtype(dtype.to_native_dtype()) != np.uint8:
            raise ValueError(f"{JPEG_CODEC}: uint8 data only, got {dtype}")

    def _frames(self, chunk_spec: ArraySpec) -> JpegFrames:
        return JpegFrames(_image_shape(tuple(chunk_spec.shape)), quality=self.quality, subsampling=self.subsampling)

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        codec = self._frames(chunk_spec)
        out = np.empty(codec.frame_shape, np.uint8)
        codec.decode_into(chunk_bytes.as_numpy_array(), out)
        return chunk_spec.prototype.nd_buffer.from_numpy_array(out.reshape(chunk_spec.shape))

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> NDBuffer:
        return self._decode_sync(chunk_bytes, chunk_spec)

    def _encode_sync(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        codec = self._frames(chunk_spec)
        frame = np.ascontiguousarray(chunk_array.as_numpy_array()).reshape(codec.frame_shape)
        return chunk_spec.prototype.buffer.from_bytes(codec.encode(frame))

    async def _encode_single(self, chunk_array: NDBuffer, chunk_spec: ArraySpec) -> Buffer | None:
        return self._encode_sync(chunk_array, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        raise NotImplementedError  # variable size
