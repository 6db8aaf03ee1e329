"""Camera frames out of (and back into) LeRobot's mp4 files, with PyAV (the ``video`` extra).

Decoding matches each dataset timestamp to the nearest decoded frame the way LeRobot does (within
``TOLERANCE_S``, else the episode's camera is reported unavailable with the timestamp that failed) and streams the
chosen frames straight into a chunk file, two frames in memory at a time. Encoding writes LeRobot's default
video: AV1 (libsvtav1), yuv420p, a keyframe every 2 frames, crf 30. As LeRobot's recorder, each episode is encoded
on its own (:class:`VideoWriter`) and the episodes' mp4 files are joined into a file without re-encoding
(:class:`Mp4Joiner`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, BinaryIO

import numpy as np

from ..errors import MissingExtraError, import_optional, missing_extra
from ..utils.sched import no_realtime
from .depth import DEPTH_PIX_FMT

__all__ = ["TOLERANCE_S", "VideoUnavailable", "DecodeLog", "decode_into", "have_pyav", "VideoWriter", "ENCODING",
           "DEPTH_ENCODING", "PIXEL_FORMATS", "frame_pixels", "check_encoder", "encoder_options", "codec_name",
           "stream_info", "Mp4Joiner", "segment_packets", "writer_settings"]

#: LeRobot's ``tolerance_s``, the one timestamp tolerance of lerobot_zarr: between a dataset timestamp and a decoded
#: frame's, between consecutive timestamps and 1/fps, and of ``delta_timestamps`` to multiples of 1/fps
TOLERANCE_S = 1e-4
ENCODING = {"vcodec": "libsvtav1", "pix_fmt": "yuv420p", "g": 2, "crf": 30, "preset": 12}
# LeRobot's depth encoder (DepthEncoderConfig), with closed GOPs (x265's open GOPs leave frames a seek cannot decode)
DEPTH_ENCODING = {"vcodec": "hevc", "pix_fmt": "gray12le", "g": 2, "crf": 30,
                  "extra_options": {"x265-params": "lossless=1:open-gop=0"}}
# Extra SVT-AV1 parameters ("key=value:..."), e.g. "lp=1": one level of parallelism, 4 threads instead of ~40,
# the same bytes, ~1.5x slower at 480x640 on 2 cores. Our test suite sets it: under heavy load the default was
# seen to hang in svt_av1_enc_send_picture.
SVT_PARAMS_ENV = "LEROBOT_ZARR_SVTAV1_PARAMS"
#: the pixel format frames of 1, 3 or 4 channels are decoded to (and encoded from), as FFmpeg names it
PIXEL_FORMATS = {1: "gray", 3: "rgb24", 4: "rgba"}


class VideoUnavailable(Exception):
    """This episode's frames of this camera cannot be had; the message says why (recorded in the store)."""


def have_pyav() -> bool:
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def pyav_missing(what: str = "decoding videos", **fields: Any) -> MissingExtraError:
    """The error (and, as text, the reason) for ``what`` needing PyAV where it is not installed."""
    try:
        import av  # noqa: F401
    except ImportError as exc:
        return missing_extra("av", what, None if isinstance(exc, ModuleNotFoundError) else exc, **fields)
    return missing_extra("av", what, **fields)


@dataclass
class DecodeLog:
    """What one decode saw, for the dataset doctor (:mod:`lerobot_zarr.doctor`): ``times[i]``, the time in the file of
    the frame query ``i`` got (NaN: none); ``unused``, the times of decoded frames between the first and the last
    query that no query took (frames the data has no row for); ``last``, the time of the file's last frame when the
    decode reached the end of the file (else None). With a log, a timestamp without a frame within ``TOLERANCE_S``
    does not stop the decode: every query gets its nearest frame, then the decode fails as without one."""

    times: np.ndarray = field(default_factory=lambda: np.zeros(0))
    unused: list[float] = field(default_factory=list)
    last: float | None = None


def frame_pixels(frame: Any, fmt: str, reformatter: Any = None) -> np.ndarray:
    """The pixels of a decoded frame (``av.VideoFrame``) in pixel format ``fmt``, as an (H, W, C) array: the one
    conversion of every decode here (swscale's, as LeRobot's ``frame.to_ndarray(format="rgb24")``: the same
    values). ``reformatter``: an ``av.video.reformatter.VideoReformatter`` of the caller's, to convert in this
    thread only (PyAV's default converts with a pool of threads that a forked child inherits without its
    threads); None for PyAV's default."""
    if reformatter is None:
        arr = frame.to_ndarray(format=fmt)
    else:
        try:
            arr = reformatter.reformat(frame, format=fmt, threads=1).to_ndarray()
        except TypeError:  # PyAV < 16: no threads option (and no threaded conversion to avoid)
            arr = reformatter.reformat(frame, format=fmt).to_ndarray()
    return arr[..., None] if arr.ndim == 2 else arr


def decode_into(source: BinaryIO | str, sink: Callable[[bytes], None], queries: np.ndarray,
                frame_shape: Sequence[int], where: str, *, depth: bool = False,
                rewind: Callable[[], None] | None = None, log: DecodeLog | None = None) -> None:
    """Decode the frames nearest to ``queries`` (seconds in the file, increasing), handing each to ``sink`` as
    raw HWC bytes, in order: uint8, or for a depth camera (``depth``) LeRobot's 12-bit codes as uint16 (its
    ``gray12le`` frames).

    ``where`` names the episode and camera in messages. Raises :class:`VideoUnavailable` when the file cannot be
    decoded, a frame has another shape, or a timestamp has no frame within ``TOLERANCE_S``; what the sink got
    until then is garbage (only a commit makes a chunk part of a store). A decoder started at a keyframe may drop
    the frames that refer to pictures before it (HEVC's open GOPs, which LeRobot's concatenated HEVC files have):
    when a frame is missing after a seek, ``rewind()`` (if given) tells the sink to start over, and decoding starts
    again a keyframe earlier, then at the file's start. ``log`` (a :class:`DecodeLog`) is filled with what the last
    attempt saw.
    """
    import av

    height, width, channels = (int(s) for s in frame_shape)
    fmt = DEPTH_PIX_FMT if depth else PIXEL_FORMATS.get(channels)
    if fmt is None or (depth and channels != 1):
        raise VideoUnavailable(f"{where}: {channels} channels cannot be decoded" + (" as depth" if depth else ""))
    queries = np.asarray(queries, dtype=np.float64)
    seek = float(queries[0]) - TOLERANCE_S
    try:
        for attempt in range(3):  # at the first query, one keyframe earlier, at the start
            if attempt and hasattr(source, "seek"):
                source.seek(0)
            with av.open(source, mode="r") as container:
                stream = container.streams.video[0]
                stream.thread_type = "AUTO"
                tb = stream.time_base
                container.seek(max(0, int(seek / tb)), stream=stream, backward=True, any_frame=False)
                if log is not None:
                    log.times, log.unused, log.last = np.full(len(queries), np.nan), [], None
                try:
                    written = _match(container.decode(stream), queries, sink, (height, width, channels), fmt, where,
                                     log)
                    break
                except _Gap as gap:
                    if seek <= 0 or rewind is None or attempt == 2:
                        raise VideoUnavailable(str(gap)) from None
                    rewind()
                    seek = (gap.first - TOLERANCE_S if attempt == 0 and gap.first is not None and gap.first < seek
                            else 0.0)
    except (VideoUnavailable, ConnectionError):  # a network failure (HubError) is not the file's fault: retry later
        raise
    except (av.error.FFmpegError, OSError, ValueError, IndexError) as exc:  # IndexError: no video stream
        raise VideoUnavailable(f"{where}: cannot decode ({type(exc).__name__}: {exc})") from None
    if written != len(queries):
        raise VideoUnavailable(f"{where}: decoded {written} of {len(queries)} frames")


class _Gap(VideoUnavailable):
    """A timestamp with no decoded frame within the tolerance; ``first``: the first frame decoded (seconds)."""

    def __init__(self, message: str, first: float | None):
        super().__init__(message)
        self.first = first


def _match(frames: Any, queries: np.ndarray, sink: Callable[[bytes], None], shape: tuple[int, int, int], fmt: str,
           where: str, log: DecodeLog | None = None) -> int:
    """Stream decoded frames, writing for each query the nearer of the frames around it (with a ``log``, what
    was seen is noted there and a frame out of tolerance is raised only at the end)."""
    n = len(queries)
    qi = 0
    prev: tuple[float, Any] | None = None
    first: list[float] = []
    cache: list[tuple[Any, bytes]] = []  # the frame chosen last and its pixels (holding it keeps its id unique)
    taken: list[bool] = [False, False]  # whether prev, and the current frame, were taken by a query
    late: list[str] = []  # with a log: the first timestamp out of tolerance

    def pixels(frame: Any) -> bytes:
        if not cache or cache[0][0] is not frame:
            arr = frame_pixels(frame, fmt)
            if arr.shape != shape:
                raise VideoUnavailable(f"{where}: decoded frames of shape {arr.shape}, the dataset declares {shape}")
            cache[:] = [(frame, np.ascontiguousarray(arr).tobytes())]
        return cache[0][1]

    def write(t: float, frame: Any, q: float) -> None:
        if abs(t - q) >= TOLERANCE_S:
            message = (f"{where}: no frame within {TOLERANCE_S} s of timestamp {q:.6f} s (nearest decoded frame at "
                       f"{t:.6f} s)")
            if log is None:
                raise _Gap(message, first[0] if first else None)
            late[:1] = late[:1] or [message]
        if log is not None:
            log.times[qi] = t
        sink(pixels(frame))

    def note_unused(t: float, was_taken: bool) -> None:
        if log is not None and not was_taken and n and queries[0] < t < queries[-1]:
            log.unused.append(t)

    for frame in frames:
        if frame.time is None:
            raise VideoUnavailable(f"{where}: decoded a frame without a timestamp")
        t = float(frame.time)
        if not first:
            first.append(t)
        while qi < n and queries[qi] <= t:
            q = float(queries[qi])
            if prev is not None and abs(prev[0] - q) < abs(t - q):
                write(prev[0], prev[1], q)
                taken[0] = True
            else:
                write(t, frame, q)
                taken[1] = True
            qi += 1
        if prev is not None:
            note_unused(prev[0], taken[0])
        if qi == n:
            break
        prev, taken = (t, frame), [taken[1], False]
    else:
        if log is not None and prev is not None:
            log.last = prev[0]
        while qi < n and prev is not None:  # past the last frame
            write(prev[0], prev[1], float(queries[qi]))
            qi += 1
    if late:
        raise _Gap(late[0], first[0] if first else None)
    return qi


def check_encoder(vcodec: str, pix_fmt: str) -> None:
    """An encoder PyAV has, with a pixel format it takes (``ValueError`` naming them). Without PyAV nothing is
    checked here: encoding needs it and says so."""
    try:
        import av
    except ImportError:
        return
    if vcodec == "auto":
        raise ValueError("vcodec 'auto': give the codec (LeRobot's RGBEncoderConfig(vcodec='auto') picks one)")
    try:
        codec = av.codec.Codec(vcodec, "w")
    except Exception:
        raise ValueError(f"Unsupported video codec: {vcodec} with video backend pyav") from None
    formats = {f.name for f in codec.video_formats or ()}
    if formats and pix_fmt not in formats:
        raise ValueError(f"pix_fmt {pix_fmt!r} is not supported by {vcodec} (it takes {sorted(formats)})")


def codec_name(vcodec: str) -> str:
    """The codec's canonical name (what a stream of this encoder says it is: libsvtav1 -> av1), as LeRobot's
    ``video.codec``."""
    av = import_optional("av", "encoding videos")
    return av.codec.Codec(vcodec, "w").canonical_name


def stream_info(path: str | os.PathLike) -> dict[str, Any]:
    """What an mp4 file's streams say, as LeRobot's info.json keeps it for a video feature (its ``get_video_info``
    without the encoder fields): ``video.height``, ``video.width``, ``video.codec`` (canonical name),
    ``video.pix_fmt``, ``video.fps`` (the stream's base rate, whole), ``video.channels`` (components of the pixel
    format), ``has_audio`` and, with an audio stream, LeRobot's ``audio.*`` keys. A file without a video stream
    gives ``{}``, as LeRobot's."""
    av = import_optional("av", "reading a video file's stream info")
    info: dict[str, Any] = {}
    with av.open(str(path), "r") as container:
        if not container.streams.video:
            return {}
        video = container.streams.video[0]
        info.update({"video.height": video.height, "video.width": video.width,
                     "video.codec": video.codec.canonical_name, "video.pix_fmt": video.pix_fmt,
                     "video.fps": int(video.base_rate),
                     "video.channels": len(av.VideoFormat(video.pix_fmt).components)})
        if not container.streams.audio:
            info["has_audio"] = False
            return info
        audio = container.streams.audio[0]
        info.update({"audio.channels": audio.channels, "audio.codec": audio.codec.canonical_name,
                     "audio.bit_rate": audio.bit_rate, "audio.sample_rate": audio.sample_rate,
                     "audio.bit_depth": audio.format.bits, "audio.channel_layout": audio.layout.name,
                     "has_audio": True})
    return info


def encoder_options(encoder: Mapping[str, Any], threads: int | None = None) -> dict[str, str]:
    """The codec options of LeRobot's encoder settings (``g``, ``crf``, ``preset``, ``fast_decode``,
    ``extra_options``; ``threads`` its global ``encoder_threads``), translated per codec as LeRobot 0.6.1 does;
    extra options never override the others. x265 gets closed GOPs (``open-gop=0``, unless given: a decoder seeking
    to a keyframe then finds every frame after it) and quiet logs."""
    vcodec, opts = encoder["vcodec"], {}

    def put(key: str, value: Any) -> None:
        if value is not None:
            opts[key] = str(value)

    put("g", encoder.get("g"))
    crf, preset, fast = encoder.get("crf"), encoder.get("preset"), encoder.get("fast_decode")
    if vcodec == "libsvtav1":
        put("crf", crf)
        put("preset", preset)
        params = [f"fast-decode={max(0, min(2, fast))}"] if fast is not None else []
        if threads is not None:
            params.append(f"lp={threads}")
        if os.environ.get(SVT_PARAMS_ENV):
            params.append(os.environ[SVT_PARAMS_ENV])
        if params:
            put("svtav1-params", ":".join(params))
    elif vcodec in ("h264", "hevc", "libx264", "libx265"):
        put("crf", crf)
        put("preset", preset)
        if fast:
            put("tune", "fastdecode")
        put("threads", threads)
    elif vcodec == "libaom-av1":
        put("crf", crf)
        put("preset", preset)
        if threads is not None:
            put("threads", threads)
            put("row-mt", 1)
    elif vcodec in ("h264_videotoolbox", "hevc_videotoolbox"):
        if crf is not None:
            put("q:v", max(1, min(100, 100 - crf * 2)))
    elif vcodec in ("h264_nvenc", "hevc_nvenc"):
        put("rc", 0)
        put("qp", crf)
        put("preset", preset)
    elif vcodec == "h264_vaapi":
        put("qp", crf)
    elif vcodec == "h264_qsv":
        put("global_quality", crf)
        put("preset", preset)
    else:
        put("crf", crf)
        put("preset", preset)
    for key, value in (encoder.get("extra_options") or {}).items():
        if key not in opts:
            put(key, value)
    if vcodec in ("hevc", "libx265"):
        params = opts.get("x265-params", "")
        extra = [p for p in ("open-gop=0", "log-level=error") if p.split("=")[0] not in params]
        opts["x265-params"] = ":".join(filter(None, [params, *extra]))
    return opts


def writer_settings(depth: bool, encoder: Mapping[str, Any] | None = None, threads: int | None = None
                    ) -> tuple[str, str, dict[str, str]]:
    """``(vcodec, pix_fmt, codec options)`` a :class:`VideoWriter` encodes with: everything that makes its bytes
    (``encoder``, ``threads`` and ``depth`` as it takes them, and :data:`SVT_PARAMS_ENV`)."""
    if encoder is not None:
        return encoder["vcodec"], encoder["pix_fmt"], encoder_options(encoder, threads)
    encoding = DEPTH_ENCODING if depth else ENCODING
    options = {"g": str(encoding["g"]), "crf": str(encoding["crf"])}
    if depth:
        options["x265-params"] = DEPTH_ENCODING["extra_options"]["x265-params"] + ":log-level=error"
    else:
        options["preset"] = str(encoding["preset"])
        if os.environ.get(SVT_PARAMS_ENV):
            options["svtav1-params"] = os.environ[SVT_PARAMS_ENV]
    return encoding["vcodec"], encoding["pix_fmt"], options


class VideoWriter:
    """One LeRobot mp4 file: episodes appended one after the other; ``duration`` is where the next one starts.
    Colour cameras are encoded as LeRobot's default (AV1); depth cameras (``depth``: 12-bit codes, uint16 frames)
    as LeRobot's depth encoder does (HEVC, ``gray12le``, lossless), with closed GOPs: a decoder that seeks to a
    keyframe (LeRobot's) then finds every frame after it."""

    def __init__(self, path: str | os.PathLike, fps: float, width: int, height: int, channels: int = 3, *,
                 depth: bool = False, encoder: Mapping[str, Any] | None = None, threads: int | None = None):
        """``encoder``: LeRobot's encoder settings (``vcodec``, ``pix_fmt``, ``g``, ``crf``... as
        :func:`encoder_options` takes them; ``threads`` LeRobot's ``encoder_threads``); None: LeRobot's default
        video (:data:`ENCODING`, :data:`DEPTH_ENCODING` for ``depth``)."""
        av = import_optional("av", "encoding videos")

        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its banner and settings to stderr otherwise
        self.fps = Fraction(fps).limit_denominator(1001)
        self.depth = depth
        vcodec, pix_fmt, options = writer_settings(depth, encoder, threads)
        self.container = av.open(str(path), mode="w")
        self.stream = self.container.add_stream(vcodec, rate=self.fps)
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = pix_fmt
        self.stream.options = options
        self.format = DEPTH_PIX_FMT if depth else PIXEL_FORMATS[channels]
        self.frames = 0
        self.packets = 0  # the encoded frames it gave back so far (an encoder holds some back: SVT-AV1 13)
        self.broken = False  # an encode failed: the file is not to be flushed, only closed

    @property
    def duration(self) -> float:
        """Seconds of video written so far: the ``from_timestamp`` of the next episode."""
        return float(self.frames / self.fps)

    def add(self, frames: np.ndarray) -> tuple[float, float]:
        """Append an episode's frames (T, H, W, C) uint8 (a depth camera's: uint16 12-bit codes); return its
        ``(from_timestamp, to_timestamp)``."""
        import av

        start = self.duration
        for image in frames:
            pixels = np.ascontiguousarray(image if image.shape[-1] != 1 else image[..., 0])
            frame = av.VideoFrame.from_ndarray(pixels, format=self.format)
            if self.depth:  # rows padded to the plane's line size: copied row by row
                plane = frame.planes[0]
                rows = np.frombuffer(plane, dtype=np.uint16).reshape(pixels.shape[0], plane.line_size // 2)
                rows[:, :pixels.shape[1]] = pixels
            frame.pts = self.frames
            frame.time_base = 1 / self.fps
            try:
                if self.frames:
                    self._mux(self.stream.encode(frame))
                else:  # the encoder opens at its first frame: SVT-AV1 run by root makes its threads real-time there
                    with no_realtime():
                        self._mux(self.stream.encode(frame))
            except BaseException:
                self.broken = True
                raise
            self.frames += 1
        return start, self.duration

    def _mux(self, packets: list) -> None:
        """Mux encoded packets (times in frames). libx265 through FFmpeg gives the packet of a one-frame video an
        undefined decoding time (seen: 0, -65600, -2.3e18), which made the mp4 muxer fail now and then at close
        (an episode of one frame is encoded on its own): a decoding time after the packet's time, or more than 16
        frames before it, is set to its time."""
        self.packets += len(packets)
        for packet in packets:
            if packet.pts is not None and packet.dts is not None and not packet.pts - 16 <= packet.dts <= packet.pts:
                packet.dts = packet.pts
        self.container.mux(packets)

    def close(self, flush: bool = True) -> None:
        """Flush the encoder and close the file; after a failed encode, or ``flush=False`` (a file dropped), only
        close it (flushing an encoder that failed to open crashes PyAV 19's process)."""
        if flush and not self.broken:
            self._mux(self.stream.encode(None))
        self.container.close()


def segment_packets(path: str | os.PathLike, frames: int, fps: float, codec: str, width: int, height: int,
                    pix_fmt: str) -> bool:
    """Whether ``path`` is a whole episode mp4 as :class:`VideoWriter` makes it: one video stream of ``codec``
    (canonical name), ``width`` x ``height``, ``pix_fmt``, holding ``frames`` packets whose times are 0, 1/fps...
    (packets are read, nothing is decoded). Anything unreadable is False. A file found whole is not read again
    while it is the same file (inode, size, modification time): a segment is written once under a new name, never
    changed in place, and an export beside a recording looks at every episode's at each saved episode."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    seen = (os.fspath(path), st.st_ino, st.st_size, st.st_mtime_ns, frames, fps, codec, width, height, pix_fmt)
    if seen in _WHOLE_SEGMENTS:
        return True
    whole = _segment_packets(path, frames, fps, codec, width, height, pix_fmt)
    if whole:
        if len(_WHOLE_SEGMENTS) >= 100_000:
            _WHOLE_SEGMENTS.clear()
        _WHOLE_SEGMENTS.add(seen)
    return whole


_WHOLE_SEGMENTS: set[tuple] = set()  # files segment_packets found whole, as they were then


def _segment_packets(path: str | os.PathLike, frames: int, fps: float, codec: str, width: int, height: int,
                     pix_fmt: str) -> bool:
    import av

    step = Fraction(fps).limit_denominator(1001)
    try:
        with av.open(str(path), "r") as container:
            if len(container.streams) != 1 or not container.streams.video:
                return False
            stream = container.streams.video[0]
            if (stream.codec_context.codec.canonical_name != codec or (stream.width, stream.height) != (width, height)
                    or stream.pix_fmt != pix_fmt):
                return False
            times = sorted(packet.pts * packet.time_base for packet in container.demux(stream)
                           if packet.pts is not None)
    except (av.error.FFmpegError, OSError, ValueError, TypeError):
        return False
    return len(times) == frames and all(abs(t - i / step) < TOLERANCE_S for i, t in enumerate(times))


class Mp4Joiner:
    """One LeRobot mp4 file made of episode mp4 files (:class:`VideoWriter`'s, one episode each, the same
    encoder settings) joined without re-encoding, as LeRobot's recorder concatenates its episodes' files: each
    one's packets copied with their times shifted to where the file's frames so far end. ``duration`` is where
    the next episode starts."""

    def __init__(self, path: str | os.PathLike, fps: float):
        av = import_optional("av", "joining videos")
        self.fps = Fraction(fps).limit_denominator(1001)
        self.container = av.open(str(path), mode="w")
        self.stream: Any = None
        self.frames = 0
        self.last_dts: Fraction | None = None  # seconds

    @property
    def duration(self) -> float:
        return float(self.frames / self.fps)

    def add(self, segment: str | os.PathLike, frames: int) -> tuple[float, float]:
        """Append the episode mp4 ``segment`` of ``frames`` frames (checked with :func:`segment_packets` by the
        caller); return its ``(from_timestamp, to_timestamp)``."""
        import av

        start = self.duration
        with av.open(str(segment), "r") as source:
            template = source.streams.video[0]
            if self.stream is None:
                self.stream = self.container.add_stream_from_template(template=template, opaque=True)
                self.stream.time_base = template.time_base
            tb = template.time_base
            shift = round(Fraction(self.frames) / self.fps / tb)
            for packet in source.demux(template):
                if packet.dts is None:  # the demuxer's flush packet
                    continue
                packet.pts += shift
                # decoding times increase through the file: an episode whose encoder had less delay than the one
                # before it (a one-frame episode has none) would start before that one's last
                dts = packet.dts + shift
                if self.last_dts is not None and dts * tb <= self.last_dts:
                    dts = int(self.last_dts / tb) + 1
                packet.dts, self.last_dts = dts, dts * tb
                packet.stream = self.stream
                self.container.mux(packet)
        self.frames += frames
        return start, self.duration

    def close(self) -> None:
        self.container.close()
