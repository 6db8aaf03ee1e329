"""Cameras: per-frame codecs of compact cameras (:mod:`.frame_codecs`) and their zarr codec classes
(:mod:`.zarr_codecs`, found by zarr through the ``zarr.codecs`` entry points), mp4 decoding and encoding with PyAV
(:mod:`.video`, :mod:`.video_reader`, with LeRobot's timestamp tolerance ``TOLERANCE_S``), resizing
(:mod:`.resize`) and LeRobot's float32 CHW images (:mod:`.images`)."""

from ..utils.lazy import lazy_face

__all__ = ["CODECS", "FrameCodec", "codec_from_zarr", "to_float32_chw", "INTERPOLATIONS", "check_resize",
           "resize_frames", "TOLERANCE_S", "VideoUnavailable", "VideoWriter", "have_pyav", "Mp4Frames"]

__getattr__, __dir__ = lazy_face(__name__, {
    "CODECS": "frame_codecs", "FrameCodec": "frame_codecs", "codec_from_zarr": "frame_codecs",
    "to_float32_chw": "images", "INTERPOLATIONS": "resize", "check_resize": "resize", "resize_frames": "resize",
    "TOLERANCE_S": "video", "VideoUnavailable": "video", "VideoWriter": "video", "have_pyav": "video",
    "Mp4Frames": "video_reader"
})
