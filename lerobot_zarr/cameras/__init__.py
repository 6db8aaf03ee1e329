"""Cameras: per-frame codecs of compact cameras (:mod:`.frame_codecs`) and their zarr codec classes
(:mod:`.zarr_codecs`, found by zarr through the ``zarr.codecs`` entry points), mp4 decoding and encoding with PyAV
(:mod:`.video`, :mod:`.video_reader`, with LeRobot's timestamp tolerance ``TOLERANCE_S``), resizing
(:mod:`.resize`) and LeRobot's float32 CHW images (:mod:`.images`)."""

from .frame_codecs import CODECS, FrameCodec, codec_from_zarr
from .images import to_float32_chw
from .resize import INTERPOLATIONS, check_resize, resize_frames
from .video import TOLERANCE_S, VideoUnavailable, VideoWriter, have_pyav
from .video_reader import Mp4Frames

__all__ = ["CODECS", "FrameCodec", "codec_from_zarr", "to_float32_chw", "INTERPOLATIONS", "check_resize",
           "resize_frames", "TOLERANCE_S", "VideoUnavailable", "VideoWriter", "have_pyav", "Mp4Frames"]
