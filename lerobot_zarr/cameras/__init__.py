"""Cameras: per-frame codecs of compact cameras (:mod:`.frame_codecs`) and their zarr codec classes
(:mod:`.zarr_codecs`, found by zarr through the ``zarr.codecs`` entry points), mp4 decoding and encoding with PyAV
(:mod:`.video`, :mod:`.video_reader`) and resizing (:mod:`.resize`)."""

from .frame_codecs import CODECS, FrameCodec, codec_from_zarr
from .resize import INTERPOLATIONS, check_resize, resize_frames
from .video import VideoUnavailable, VideoWriter, have_pyav
from .video_reader import Mp4Frames

__all__ = ["CODECS", "FrameCodec", "codec_from_zarr", "INTERPOLATIONS", "check_resize", "resize_frames",
           "VideoUnavailable", "VideoWriter", "have_pyav", "Mp4Frames"]
