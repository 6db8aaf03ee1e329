"""Recording with LeRobot 0.6.1's API into a crash-safe store: the drop-in's ``LeRobotDataset.create``, ``resume``,
``add_frame``, ``save_episode``, ``clear_episode_buffer``, ``has_pending_frames``, ``finalize`` and ``push_to_hub``.

As in LeRobot, the dataset composes a reader and a writer: its ``writer`` (:class:`~.lerobot_recorder.Recorder`)
records into a lerobot_zarr store at ``root`` (:func:`lerobot_zarr.create`), each ``save_episode`` one atomic
commit; its reading side is the drop-in's own, opened on that store when first read after ``finalize()`` (LeRobot
refuses items before: its files are complete only then). The store needs no finalizing: a recorder killed at any
instant keeps every episode whose ``save_episode`` returned, any process can open them at once
(``LeRobotDataset(repo_id, root=root)``), and ``resume`` goes on after them. ``finalize()`` closes and leaves
``root`` a LeRobot v3.0 dataset too, as LeRobot's recorder leaves it: LeRobot's files of the store's last commit
beside the store (:func:`~lerobot_zarr.writing.export.export_beside`), for LeRobot's class and tools.

Cameras are kept raw while recording (no encoding on the way: ``add_frame`` copies a frame, ``save_episode`` writes
and commits), and encoded to mp4 with the ``rgb_encoder`` / ``depth_encoder`` settings (kept in each video feature's
``info``, as LeRobot keeps them), episode by episode, by a background encoder process (a thread per camera,
:mod:`lerobot_zarr.writing.segments`): as each episode is recorded (LeRobot's default, and ``streaming_encoding``), or
the saved episodes at every ``batch_encoding_size``-th ``save_episode``, which returns once they made them (as
LeRobot's: its videos complete; ``add_frame`` never waits at a camera's pace). ``finalize`` (and a push) join their
per-episode mp4s without encoding them again, encoding only what they did not.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..cameras.depth import depth_stats, is_depth_feature
from ..errors import ArgumentError, StoreExistsError, StoreLockedError, warn_user
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES
from .lerobot_frames import recording_features
from .lerobot_meta import LeRobotDatasetMetadata, episode_tasks, lerobot_home
from .lerobot_recorder import Recorder

__all__ = ["LeRobotRecording", "RecordingMetadata", "RGB_ENCODER", "DEPTH_ENCODER", "VIDEO_BACKENDS"]

VIDEO_BACKENDS = ("torchcodec", "pyav", "video_reader")  # LeRobot's names; decoding here is PyAV's either way
#: LeRobot 0.6.1's default encoders (``rgb_encoder_defaults()``, ``depth_encoder_defaults()``), field by field
RGB_ENCODER = {"vcodec": "libsvtav1", "pix_fmt": "yuv420p", "g": 2, "crf": 30, "preset": 12, "fast_decode": 0,
               "video_backend": "pyav", "extra_options": {}}
DEPTH_ENCODER = {"vcodec": "hevc", "pix_fmt": "gray12le", "g": 2, "crf": 30, "preset": None, "fast_decode": 0,
                 "video_backend": "pyav", "extra_options": {"x265-params": "lossless=1"}, "depth_min": 0.01,
                 "depth_max": 10.0, "shift": 3.5, "use_log": True}
_NOT_RECORDING = ("Cannot call '{}()' on a read-only dataset. Use LeRobotDataset.create() for new recording or "
                  "LeRobotDataset.resume() for resume recording.")


class RecordingMetadata(LeRobotDatasetMetadata):
    """``meta`` of a dataset being recorded: LeRobot's metadata, following the store after each commit (counts,
    tasks, stats, a depth camera's unit once learnt), with LeRobot's ``update_chunk_settings`` (kept in the store)."""

    @classmethod
    def of_writer(cls, store: Any, repo_id: str) -> RecordingMetadata:
        self = cls.__new__(cls)
        self._writer = store
        self.repo_id, self.root = repo_id, Path(store.root)
        self.follow()
        return self

    def follow(self) -> None:
        """Describe the store's last commit (stats as recorded: a depth camera's in its recorded unit, as LeRobot's
        recorder keeps them)."""
        meta = self._writer.reader.meta
        features = meta.info["features"]
        stats = {k: depth_stats(v, meta.depth_unit, (features[k].get("info") or {}).get("depth_unit"))
                 if k in features and is_depth_feature(features[k]) else v for k, v in (meta.stats or {}).items()}
        self._setup(meta, repo_id=self.repo_id, root=self.root, revision=None, files=None,
                    episode_tasks=lambda: episode_tasks(meta), stats=stats)
        self.revision = None  # LeRobot's recorder has none
        from ..writing.export import info_beside

        info_beside(self._writer.reader)  # LeRobot's recorder keeps meta/info.json up to date as it records

    def read_files_beside(self) -> None:
        """After ``finalize()``: LeRobot's episode table (with its file locations) read from the files it put beside
        the store, as LeRobot's metadata reads its own."""
        from ..lerobot.source_files import LocalFiles
        from ..writing.export import exported_state

        if exported_state(self.root) is not None:
            self._files, self._episodes = LocalFiles(self.root), None
            self._features_info_beside()

    @property
    def episodes(self) -> Any:
        """LeRobot's episode table (None before the first episode, as LeRobot's recorder has it)."""
        return super().episodes if self.total_episodes else None

    @episodes.setter
    def episodes(self, value: Any) -> None:
        self._episodes = value

    def update_chunk_settings(self, chunks_size: int | None = None, data_files_size_in_mb: int | None = None,
                              video_files_size_in_mb: int | None = None) -> None:
        """LeRobot's: the sizes of the files a push or export writes (each positive, else its ``ValueError``),
        committed to the store."""
        fields = {"chunks_size": chunks_size, "data_files_size_in_mb": data_files_size_in_mb,
                  "video_files_size_in_mb": video_files_size_in_mb}
        fields = {k: v for k, v in fields.items() if v is not None}
        for key, value in fields.items():
            if value <= 0:
                raise ValueError(f"{key} must be positive, got {value}")
        if fields:
            self._writer.update_info(**fields)
            self.follow()


class LeRobotRecording:
    """LeRobot 0.6.1's recording API of the drop-in ``LeRobotDataset`` (mixed into it); see the module docstring.
    A dataset opened to read has no ``writer``: its recording methods raise LeRobot's ``RuntimeError``."""

    writer: Recorder | None = None
    _is_finalized = False

    @classmethod
    def create(cls, repo_id: str, fps: int, features: dict, root: str | os.PathLike | None = None,
               robot_type: str | None = None, use_videos: bool = True, tolerance_s: float = 1e-4,
               image_writer_processes: int = 0, image_writer_threads: int = 0, video_backend: str | None = None,
               batch_encoding_size: int = 1, rgb_encoder: Any = None, depth_encoder: Any = None,
               metadata_buffer_size: int = 10, streaming_encoding: bool = False, encoder_queue_maxsize: int = 30,
               encoder_threads: int | None = None, video_files_size_in_mb: int | None = None,
               data_files_size_in_mb: int | None = None, *, durable: bool = True) -> Any:
        """A new dataset recorded into a lerobot_zarr store at ``root`` (default ``$HF_LEROBOT_HOME/<repo_id>``;
        must not exist: LeRobot's ``FileExistsError``). LeRobot 0.6.1's parameters, each with its meaning here:

        - ``fps``, ``features``, ``robot_type``, ``use_videos`` (``False`` with video features is LeRobot's
          ``ValueError``), ``tolerance_s``, ``video_backend`` (reading back: LeRobot's names, frames decoded with
          PyAV), ``data_files_size_in_mb`` / ``video_files_size_in_mb`` (the files a push writes).
        - ``rgb_encoder`` / ``depth_encoder``: LeRobot's ``RGBEncoderConfig`` / ``DepthEncoderConfig`` (or dicts of
          their fields; None: LeRobot's defaults), kept in each video feature's ``info`` and used wherever its mp4
          is made; a depth video's quantizer (``depth_min``...) makes the codes the store keeps.
        - ``streaming_encoding`` / ``batch_encoding_size`` (a positive int): LeRobot's ways of encoding video as
          frames come or every that many episodes; here a background encoder process encodes each saved episode
          (by default and streaming) or each batch of that many (the rest at ``finalize``); ``save_episode`` returns
          with its videos made, as LeRobot's (see the module docstring). ``encoder_queue_maxsize`` (a positive
          int): LeRobot's frames queued for its encoder: how far a streaming encoder may fall behind frames given
          faster than the fps before ``add_frame`` waits for it without bound (within it, 2 frames taken and 32
          held not yet encoded: at most 0.7 of a frame period per call); none dropped. ``encoder_threads``: the encoder's threads, as LeRobot's
          (kept in each video feature's ``info`` with the encoder settings: every encoding of them uses it).
        - ``image_writer_processes`` / ``image_writer_threads``: LeRobot's PNG writers; frames are not encoded
          while recording, so none starts. As with LeRobot, their number says whether ``add_frame`` holds the
          caller's camera arrays until written (more than 0: as LeRobot's asynchronous writers, the caller must not
          write into them afterwards; cheaper) or copies them (0, the default: LeRobot then writes them at once).
          ``metadata_buffer_size``: LeRobot writes episode metadata in batches; here each episode's is committed
          with it, so nothing is buffered.

        ``durable`` (lerobot_zarr's, keyword-only): each ``save_episode`` flushes to disk (survives power loss);
        ``False`` is still safe when the process is killed."""
        _check_backend(video_backend)
        _check_counts(batch_encoding_size=batch_encoding_size, encoder_queue_maxsize=encoder_queue_maxsize,
                      metadata_buffer_size=metadata_buffer_size, image_writer_processes=image_writer_processes,
                      image_writer_threads=image_writer_threads, encoder_threads=encoder_threads)
        features = recording_features(features, use_videos)
        from ..writing.export import LEROBOT_ENTRIES

        clash = sorted(set(features) & set(LEROBOT_ENTRIES))
        if clash:  # the store's folders and LeRobot's files share root (finalize writes them beside the store)
            raise ArgumentError(f"feature {clash[0]!r}: a recording's root holds LeRobot's {list(LEROBOT_ENTRIES)} "
                                f"folders beside the store's feature folders; rename the feature")
        root = Path(root) if root is not None else lerobot_home() / repo_id
        if root.exists() or root.is_symlink():
            raise StoreExistsError(f"[Errno 17] File exists: '{root}' (LeRobotDataset.create records a new "
                                   f"dataset; continue one with LeRobotDataset.resume)", path=root)
        rgb, depth = encoder_settings(rgb_encoder, RGB_ENCODER), encoder_settings(depth_encoder, DEPTH_ENCODER)
        stored = {}
        for key, ft in features.items():
            if key in DEFAULT_FEATURES:
                continue
            stored[key] = ft
            if ft.get("dtype") == "video":
                # the encoder's fields over any the feature's info declares, as LeRobot's recorder writes them
                stored[key] = {**ft, "info": {**(ft.get("info") or {}), **_video_info(depth if _is_depth(ft) else rgb),
                                              **_threads_info(encoder_threads)}}
        from ..writing.writer import create as create_store

        sizes = {k: v for k, v in (("data_files_size_in_mb", data_files_size_in_mb),
                                   ("video_files_size_in_mb", video_files_size_in_mb)) if v is not None}
        store = create_store(root, fps=fps, features=stored, robot_type=robot_type, durable=durable)
        return cls._recording(repo_id, store, lambda: store.update_info(**sizes) if sizes else None,
                              tolerance_s=tolerance_s, video_backend=video_backend,
                              streaming_encoding=streaming_encoding, batch_encoding_size=batch_encoding_size,
                              encoder_threads=encoder_threads, encoder_queue_maxsize=encoder_queue_maxsize,
                              hold_frames=bool(image_writer_threads or image_writer_processes))

    @classmethod
    def resume(cls, repo_id: str, root: str | os.PathLike | None = None, tolerance_s: float = 1e-4,
               revision: str | None = None, force_cache_sync: bool = False, video_backend: str | None = None,
               batch_encoding_size: int = 1, rgb_encoder: Any = None, depth_encoder: Any = None,
               encoder_threads: int | None = None, image_writer_processes: int = 0, image_writer_threads: int = 0,
               streaming_encoding: bool = False, encoder_queue_maxsize: int = 30, *,
               token: str | bool | None = None, durable: bool = True) -> Any:
        """Go on recording the dataset at ``root`` (required, LeRobot's ``ValueError`` otherwise), after a
        ``finalize()`` or a crash: its episodes are every one whose ``save_episode`` returned. ``root`` holds the
        store a recorder made (a LeRobot folder is refused with a ``StoreNotFoundError`` saying how to read it).
        ``rgb_encoder`` / ``depth_encoder`` / ``encoder_threads`` given replace the settings recorded for the videos
        not encoded yet; the other parameters are :meth:`create`'s. ``revision``, ``force_cache_sync`` and ``token`` matter when
        ``root`` has to be fetched from the Hub: here ``root`` must hold the dataset."""
        if not root:
            raise ValueError("resume() requires an explicit 'root' directory because it creates a DatasetWriter. "
                             "Writing into the revision-safe Hub snapshot cache (used when root=None) would corrupt "
                             "the shared cache. Please provide a local directory path.")
        _check_backend(video_backend)
        _check_counts(batch_encoding_size=batch_encoding_size, encoder_queue_maxsize=encoder_queue_maxsize,
                      image_writer_processes=image_writer_processes, image_writer_threads=image_writer_threads,
                      encoder_threads=encoder_threads)
        from ..store.state import has_commit_point
        from ..writing.writer import WritableDataset

        root = Path(root)
        if not has_commit_point(root):
            from ..errors import StoreNotFoundError

            raise StoreNotFoundError(f"{root}: holds no dataset recorded by lerobot_zarr (LeRobotDataset.create); "
                                     f"a LeRobot folder is read with LeRobotDataset(repo_id, root=...), and "
                                     f"recorded into with LeRobot's own class", path=root)
        from ..writing.export import check_unedited_beside

        check_unedited_beside(root)  # before any recording: its finalize could not write the files again
        try:
            store = WritableDataset(root, durable=durable)
        except StoreLockedError:  # a recorder of this process dropped without finalize() may hold it until collected
            gc.collect()
            store = WritableDataset(root, durable=durable)

        def new_encoders() -> None:
            updates = {}
            for key, ft in store.meta.info["features"].items():
                given = depth_encoder if _is_depth(ft) else rgb_encoder
                if ft.get("dtype") == "video" and given is not None:
                    defaults = DEPTH_ENCODER if _is_depth(ft) else RGB_ENCODER
                    updates[key] = _video_info(encoder_settings(given, defaults))
                if ft.get("dtype") == "video" and encoder_threads is not None:
                    updates[key] = {**updates.get(key, {}), **_threads_info(encoder_threads)}
            if updates:
                store.update_info(updates)

        return cls._recording(repo_id, store, new_encoders, tolerance_s=tolerance_s, video_backend=video_backend,
                              streaming_encoding=streaming_encoding, batch_encoding_size=batch_encoding_size,
                              encoder_threads=encoder_threads, encoder_queue_maxsize=encoder_queue_maxsize,
                              hold_frames=bool(image_writer_threads or image_writer_processes))

    @classmethod
    def _recording(cls, repo_id: str, store: Any, prepare: Callable[[], None], *, tolerance_s: float,
                   video_backend: str | None, streaming_encoding: bool, batch_encoding_size: int,
                   encoder_threads: int | None, hold_frames: bool, encoder_queue_maxsize: int) -> Any:
        """The drop-in dataset recording into ``store`` (a WritableDataset, closed if this fails), after
        ``prepare()`` (its changes to the store's info): LeRobot's attributes of a recorder."""
        obj = cls.__new__(cls)
        obj.repo_id = repo_id
        obj.root = obj._requested_root = Path(store.root)
        obj.revision = None
        obj.tolerance_s = tolerance_s
        obj.image_transforms = None
        obj.delta_timestamps = None
        obj.episodes = None
        obj.batched_fetch = True
        obj._return_uint8 = False
        obj._depth_output_unit = "mm"
        obj._video_backend = video_backend
        obj._encoder_threads = encoder_threads
        obj._batch_encoding_size = batch_encoding_size
        obj.reader = None
        obj.dataset = None
        obj._is_finalized = False
        try:
            prepare()
            obj.meta = RecordingMetadata.of_writer(store, repo_id)
            obj.writer = Recorder(store, obj.meta.features, on_saved=obj.meta.follow,
                                  streaming_encoding=streaming_encoding, batch_encoding_size=batch_encoding_size,
                                  encoder_threads=encoder_threads, hold_frames=hold_frames,
                                  encoder_queue_maxsize=encoder_queue_maxsize)
        except BaseException:
            store.close()
            raise
        return obj

    # -- LeRobot's recording methods --------------------------------------------------------------------------
    def _require_writer(self, method: str) -> Recorder:
        if self.writer is None:
            raise RuntimeError(_NOT_RECORDING.format(method))
        return self.writer

    def add_frame(self, frame: dict) -> None:
        """One frame of the episode being recorded: every feature but LeRobot's own columns, and ``task``;
        checked as LeRobot checks it (its ``ValueError``). Torch tensors are taken as numpy."""
        self._require_writer("add_frame").add_frame(frame)

    def save_episode(self, episode_data: dict | None = None, parallel_encoding: bool = True) -> None:
        """Commit the episode recorded since the last one (or ``episode_data``, LeRobot's episode buffer dict): once
        this returns it is on disk, readable by any process, kept whatever happens to this one."""
        self._require_writer("save_episode").save_episode(episode_data, parallel_encoding)

    def clear_episode_buffer(self, delete_images: bool = True) -> None:
        """Drop the frames recorded since the last saved episode."""
        self._require_writer("clear_episode_buffer").clear_episode_buffer(delete_images)

    def has_pending_frames(self) -> bool:
        """Whether frames were added since the last saved episode."""
        return self.writer is not None and self.writer.pending_frames > 0

    def finalize(self) -> None:
        """Close the recorder and leave ``root`` a LeRobot v3.0 dataset beside the store (LeRobot's files of the
        last commit; see :meth:`.Recorder.finalize`), as LeRobot's finalize does. Idempotent; the store needs none
        of it (every saved episode is committed already). Items can be read after it, as in LeRobot."""
        if self._is_finalized:
            return
        if self.writer is not None:
            self.writer.finalize()
            self.meta.read_files_beside()
        self._is_finalized = True

    def _check_readable(self) -> None:
        """LeRobot's rule: a dataset being recorded is read once finalized; the reading side opens then."""
        if self.writer is not None and not self._is_finalized:
            raise RuntimeError("Cannot read from a dataset that is being recorded. Call finalize() first, then "
                               "access items.")

    # -- the Hub ----------------------------------------------------------------------------------------------
    def push_to_hub(self, branch: str | None = None, tags: list | None = None, license: str | None = "apache-2.0",
                    tag_version: bool = True, push_videos: bool = True, private: bool | None = None,
                    allow_patterns: list[str] | str | None = None, upload_large_folder: bool = False,
                    **card_kwargs: Any) -> str | None:
        """Publish the dataset to ``repo_id`` as LeRobot v3.0, as LeRobot's recorder would have pushed it (its
        features, stats, tasks; videos encoded with the encoder settings recorded), in ONE commit: ``branch``
        (created from main if new), ``tags`` and ``license`` and the other dataset card fields (``card_kwargs``:
        LeRobot's template's ``dataset_description``, ``url``, ``paper``, ``citation_bibtex``), ``tag_version``
        (tag ``v3.0``), ``push_videos=False`` (no mp4 uploaded; the remote's stay), ``private`` (a new repo's
        visibility; None: the Hub's default), ``allow_patterns`` (only matching files uploaded or removed).
        ``upload_large_folder`` is LeRobot's switch to a resumable upload for very large folders: this push is
        resumable as it is (running it again completes one that failed), so it changes nothing. Returns the new
        commit (None: nothing changed). Works while recording too: what is pushed is the last commit."""
        from ..writing.export import push

        card = card_fields(tags, license, card_kwargs, self.repo_id)
        if self.writer is not None:
            self.writer.flush_pending_videos()  # the background encoder's segments: joined, not encoded again
        opened = False  # the whole dataset, opened for this push (the dataset was opened on some episodes)
        if self.writer is not None and not self._is_finalized:
            source = self.writer.store_reader()
        else:
            self._check_readable()
            self._open_if_needed()
            source = self._pushed_dataset()
            opened = source is not self.dataset
        sizes = {k: source.meta.info[k] for k in ("data_files_size_in_mb", "video_files_size_in_mb")
                 if source.meta.info.get(k)}  # the recording's (create, meta.update_chunk_settings) or source's
        try:
            return push(source, self.repo_id, revision=branch, private=private, card=card, tag_version=tag_version,
                        videos_pushed=push_videos, allow_patterns=allow_patterns,
                        encoder_threads=getattr(self, "_encoder_threads", None), **sizes)
        finally:
            if opened:
                source.close()


def card_fields(tags: list | None, license: str | None, card_kwargs: Mapping[str, Any], repo_id: str
                ) -> dict[str, Any]:
    """The dataset card's fields, as LeRobot's ``push_to_hub`` gives them to ``create_lerobot_dataset_card``: every
    keyword goes to its card template, which renders only its own fields (``dataset_description``, ``url``,
    ``paper``, ``citation_bibtex``): another is accepted as LeRobot accepts it, with a warning that the card does not
    show it. A keyword that LeRobot's call also passes itself (``repo_id``, ``dataset_info``, the template's
    ``card_data``, ``template_str``) is its ``TypeError``. ``template_path`` (a Jinja template file, checked to be
    one before anything is pushed) replaces LeRobot's template as in LeRobot: huggingface_hub's
    ``DatasetCard.from_template`` renders it with every keyword, any of which may be one of its fields."""
    taken = sorted(set(card_kwargs) & {"repo_id", "dataset_info", "card_data", "template_str"})
    if taken:
        raise TypeError(f"push_to_hub() got multiple values for keyword argument {taken[0]!r} (LeRobot's dataset "
                        f"card sets it itself)")
    template = card_kwargs.get("template_path")
    if template is not None and not Path(template).is_file():
        raise FileNotFoundError(f"push_to_hub(): template_path {os.fspath(template)!r} is no file")
    unknown = sorted(set(card_kwargs) - CARD_FIELDS)
    if unknown and template is None:
        warn_user(f"push_to_hub(): {unknown} are not fields of LeRobot's dataset card template (its fields: "
                  f"{sorted(CARD_FIELDS)}): the card does not show them, as LeRobot's does not")
    if tags is not None and (isinstance(tags, str) or not all(isinstance(t, str) for t in tags)):
        raise ArgumentError(f"tags must be a list of strings, got {tags!r:.80}")
    known = {k: v for k, v in card_kwargs.items() if k in CARD_FIELDS or template is not None}
    if template is not None:
        known["template_path"] = os.fspath(template)
    return {"tags": list(tags or []), "license": license, "repo_id": repo_id, **known}


#: the fields of LeRobot 0.6.1's dataset card template (``card_template.md``) a caller gives
CARD_FIELDS = frozenset({"dataset_description", "url", "paper", "citation_bibtex"})


def encoder_settings(config: Any, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """An encoder's settings, LeRobot's fields (``vcodec``, ``pix_fmt``, ``g``, ``crf``, ``preset``,
    ``fast_decode``, ``video_backend``, ``extra_options``; a depth encoder's quantizer): from LeRobot's
    ``RGBEncoderConfig`` / ``DepthEncoderConfig`` (or a dict of their fields), None for LeRobot's defaults. A field
    the encoder does not have is a ``TypeError`` naming it."""
    if config is None:
        return dict(defaults)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        given = dataclasses.asdict(config)
    elif isinstance(config, Mapping):
        given = dict(config)
    else:
        raise TypeError(f"an encoder is LeRobot's RGBEncoderConfig / DepthEncoderConfig or a dict of their fields, "
                        f"got {type(config).__name__}")
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(f"encoder settings {unknown} are not LeRobot's (fields: {sorted(defaults)})")
    out = {**defaults, **given}
    if out["vcodec"] == "av1":
        out["vcodec"] = "libsvtav1"
    if out["vcodec"] == "libsvtav1" and out.get("preset") is None:
        out["preset"] = 12  # LeRobot's default preset of SVT-AV1
    if out.get("video_backend", "pyav") != "pyav":
        raise ValueError(f"encoder video_backend {out['video_backend']!r}: only 'pyav' encodes (as in LeRobot)")
    from ..cameras.video import check_encoder

    check_encoder(out["vcodec"], out["pix_fmt"])
    return out


def _video_info(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Encoder settings as a video feature's ``info`` keys in the store (LeRobot's ``video.<field>``, and
    ``video.vcodec``: the export encodes with them and writes LeRobot's info, see ``writing.export``)."""
    return {f"video.{k}": v for k, v in settings.items()}


def _threads_info(encoder_threads: int | None) -> dict[str, int]:
    """LeRobot's ``encoder_threads`` as a video feature's ``info`` key in the store (not exported: LeRobot's info
    has none), so that every encoder of the recording's videos (background, push, ``lerobot-zarr push``) uses it."""
    return {} if encoder_threads is None else {"encoder_threads": encoder_threads}


def _is_depth(feature: Mapping[str, Any]) -> bool:
    from ..cameras.depth import is_depth_feature

    return feature.get("dtype") in CAMERA_DTYPES and is_depth_feature(feature)


def _check_counts(**counts: int | None) -> None:
    """LeRobot's counts: ``batch_encoding_size``, ``encoder_queue_maxsize``, ``metadata_buffer_size`` and
    ``encoder_threads`` at least 1 (``encoder_threads`` may be None: the encoder's default), image writers at least
    0 (``ArgumentError`` naming the parameter)."""
    from ..writing.values import count_arg

    for name, value in counts.items():
        if value is not None or name != "encoder_threads":
            count_arg(name, value, 0 if name.startswith("image_writer") else 1)


def _check_backend(video_backend: str | None) -> None:
    if video_backend is not None and video_backend not in VIDEO_BACKENDS:
        raise ValueError(f"Unsupported video backend: {video_backend}")
