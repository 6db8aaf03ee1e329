"""The ``LeRobotDataset`` drop-in: LeRobot 0.6.1's dataset class for everything that reads (its constructor, items,
slices, transforms, ``meta``) served from a lerobot_zarr store; its DataLoader batches made by one ``get_batch`` (the
batched fetch of :mod:`.torch_collate`). Its metadata types are :mod:`.lerobot_meta`'s; its recording API
(``create``, ``resume``, ``add_frame``, ``save_episode``, ``finalize``, ``push_to_hub``...) is
:mod:`.lerobot_recording`'s, whose datasets open this reading side on their store once finalized."""

from __future__ import annotations

import logging
import operator
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, import_optional

torch = import_optional("torch", "lerobot_zarr.integrations.torch (the torch adapter and LeRobotDataset drop-in)")
from torch.utils.data import Dataset  # noqa: E402

from ..cameras.depth import DEPTH_UNITS  # noqa: E402
from ..cloud.urls import is_bucket_url  # noqa: E402
from ..lerobot.format import CAMERA_DTYPES  # noqa: E402
from ..lerobot.source_files import is_lerobot_folder  # noqa: E402
from .lerobot_meta import LeRobotDatasetMetadata, episode_tasks, is_store, local_source  # noqa: E402
from .lerobot_recording import VIDEO_BACKENDS, LeRobotRecording  # noqa: E402
from .torch_collate import batch_items  # noqa: E402
from .torch_memory import to_tensors  # noqa: E402

__all__ = ["LeRobotDataset", "LeRobotDatasetMetadata"]

logger = logging.getLogger(__name__)


class LeRobotDataset(LeRobotRecording, Dataset):
    """LeRobot 0.6.1's ``LeRobotDataset`` for reading, served from a lerobot_zarr store (made on first use, see
    :func:`lerobot_zarr.open_dataset`): the same arguments in the same places, the same items (tensors of LeRobot's
    dtypes: floats float32, integers int64, 0-d for shape-(1,) features; cameras float32 CHW in [0, 1]; depth in
    ``depth_output_unit``; ``<key>_is_pad`` masks; ``task`` and string features as ``str``) and the same ``meta``
    (:class:`~.lerobot_meta.LeRobotDatasetMetadata`). docs/torch.md lists what differs and what is not provided.

    Where the data comes from, as LeRobot looks for it: ``root`` when it holds a LeRobot dataset (or a store), else,
    without ``root``, ``$HF_LEROBOT_HOME/<repo_id>`` when it holds one, else the Hub repo ``repo_id`` at ``revision``
    (only the episodes asked for are downloaded; into a store at ``root`` when given, as LeRobot downloads there).
    ``force_cache_sync=True`` reads the Hub even when a local copy exists. ``root`` may also be a bucket folder
    (``s3://``, ``gs://``, ``az://``, ``hf://buckets/...``, as LeRobot's newer docs write it): a store there is read
    where it is, a LeRobot folder there is transcoded into ``store`` (default the cache); ``root`` stays that URL
    (a ``str``); anything else there is refused (``SourceNotFoundError`` naming it), never read from the Hub instead.

    LeRobot's reading arguments keep their meaning: ``episodes`` (as given, or intersected with ``episode_filter``, a
    predicate over rows of ``meta.episodes``; matching nothing is a ``ValueError``), ``image_transforms`` (per item,
    on every camera but depth ones), ``delta_timestamps`` (multiples of 1/fps within ``tolerance_s``, rounded to
    frames as LeRobot does), ``return_uint8`` (RGB video frames as uint8 CHW), ``depth_output_unit`` (``"mm"`` or
    ``"m"``; depth stats rescaled to it), ``download_videos=False`` (video cameras left out of items, said in a
    warning, where LeRobot's items fail on the missing files; from the Hub they are still fetched into the store),
    ``revision``, ``token``.
    ``video_backend`` is accepted (LeRobot's names) and changes nothing: frames are decoded with PyAV, identical to
    LeRobot's decode. The recording arguments (``batch_encoding_size``, encoders, ``streaming_encoding``...) are
    LeRobot's deprecated way to resume recording from here: values asking for a recorder are refused (use
    ``LeRobotDataset.resume``).

    Recording is LeRobot's too: ``LeRobotDataset.create(repo_id, fps, features, ...)`` and ``resume(...)`` record
    into a crash-safe store (:mod:`.lerobot_recording`); such a dataset reads once ``finalize()`` was called.

    Our own, keyword-only: ``store`` (where the store of a local LeRobot folder lives; default the cache) and
    ``batched_fetch``: in a plain ``DataLoader(ds, batch_size=B)`` each batch is one ``get_batch`` (torch's batched
    fetch, ``__getitems__``), handed to the collate function as items sharing the batch's columns that
    ``default_collate`` takes back into exactly LeRobot's batch (docs/torch.md); a ``collate_fn`` of your own gets
    each item's own values when it reads one; ``batched_fetch=False`` makes items one by one.

    Its instance attributes (``vars()``) are LeRobot's (``repo_id``, ``root``, ``meta``, ``reader``, ``writer``...);
    lerobot_zarr's own state (``dataset``: the store's :class:`~lerobot_zarr.LeRobotZarrDataset`, ``batched_fetch``)
    is kept in slots.
    """

    __slots__ = ("dataset", "batched_fetch", "_folder", "_frames", "_depth", "_cameras", "_rgb", "_uint8_video",
                 "_skip", "_source")

    def __init__(self, repo_id: str, root: str | os.PathLike | None = None, episodes: list[int] | None = None,
                 episode_filter: Callable[[dict], bool] | None = None, image_transforms: Callable | None = None,
                 delta_timestamps: dict[str, list[float]] | None = None, tolerance_s: float = 1e-4,
                 revision: str | None = None, force_cache_sync: bool = False, download_videos: bool = True,
                 video_backend: str | None = None, return_uint8: bool = False, depth_output_unit: str = "mm",
                 batch_encoding_size: int = 1, rgb_encoder: Any = None, depth_encoder: Any = None,
                 encoder_threads: int | None = None, streaming_encoding: bool = False, encoder_queue_maxsize: int = 30,
                 *, token: str | bool | None = None, store: str | os.PathLike | None = None,
                 batched_fetch: bool = True):
        super().__init__()
        if image_transforms is not None and not callable(image_transforms):
            raise TypeError("image_transforms must be callable or None.")
        if depth_output_unit not in DEPTH_UNITS:
            raise ValueError(f"depth_output_unit must be one of {DEPTH_UNITS}, got {depth_output_unit!r}")
        if video_backend is not None and video_backend not in VIDEO_BACKENDS:
            raise ValueError(f"Unsupported video backend: {video_backend}")
        if streaming_encoding or batch_encoding_size != 1:
            raise ArgumentError("streaming_encoding / batch_encoding_size ask LeRobotDataset.__init__ to resume "
                                "recording (deprecated in LeRobot): use LeRobotDataset.resume(repo_id, root=..., "
                                "streaming_encoding=..., batch_encoding_size=...)")
        if episodes is not None and len(episodes) == 0:  # LeRobot's: its Parquet reader finds no data
            raise ValueError(f"{repo_id}: episodes=[] selects no episode: give None for every episode")
        self.repo_id = repo_id
        self._requested_root = root if is_bucket_url(root) else Path(root) if root else None
        self.tolerance_s = tolerance_s
        self.delta_timestamps = delta_timestamps
        self.image_transforms = image_transforms
        self.batched_fetch = batched_fetch
        self._return_uint8 = bool(return_uint8)
        self._depth_output_unit = depth_output_unit
        self._video_backend = video_backend if video_backend else "pyav"  # frames are decoded with PyAV
        self._batch_encoding_size, self._encoder_threads = batch_encoding_size, encoder_threads
        self.writer, self._is_finalized = None, False
        self._open(root, episodes, episode_filter, revision, force_cache_sync, token, store, download_videos)

    # -- opening ---------------------------------------------------------------------------------------------
    def _open(self, root: str | os.PathLike | None, episodes: list[int] | None,
              episode_filter: Callable[[dict], bool] | None, revision: str | None, force_cache_sync: bool,
              token: str | bool | None, store: str | os.PathLike | None, download_videos: bool) -> None:
        """The reading side: the store serving ``repo_id`` (made or fetched if need be), ``meta`` and the plan of
        items. ``__init__`` opens it at once; a recorded dataset when first read after ``finalize()``."""
        repo_id, delta_timestamps, tolerance_s = self.repo_id, self.delta_timestamps, self.tolerance_s
        bucket = is_bucket_url(root)  # (a folder of a bucket: read there, or made into a store here)
        local = None if bucket else local_source(repo_id, root, force_cache_sync)
        self._folder = local if local is not None and not is_store(local) else None
        self.root = root if bucket else Path(root) if root is not None else local
        self.revision = revision if revision else "v3.0"
        source = root if bucket else local if local is not None else repo_id
        if local is not None and self._folder is None and _edited_beside(local):
            from ..sources.local import FolderSource

            source, self._folder = FolderSource(local), local  # LeRobot's files as a LeRobot tool changed them
        # the store: of a local folder or a bucket's, where store= says (else the cache); from the Hub, at root when
        # given (where LeRobot downloads), unless root holds a LeRobot folder (force_cache_sync): never a store
        # inside one
        into_root = local is None and root is not None and not bucket and not is_lerobot_folder(Path(root).expanduser())
        common = dict(root=root if store is None and into_root else store,
                      revision=None if local is not None else revision, token=token, image_format="uint8_hwc",
                      depth_unit=self._depth_output_unit)
        deltas = None
        if episode_filter is not None or delta_timestamps is not None:  # decided on the metadata, before any fetch
            from ..api import open_dataset

            head = open_dataset(source, lazy=True, **common)
            try:
                _check_windowable(delta_timestamps, head.meta.features)
                if episode_filter is not None:
                    episodes = _filtered(self._make_meta(head.meta, None, head.left_out), episodes, episode_filter)
                deltas = _frame_deltas(delta_timestamps, head.meta.fps, tolerance_s)
            finally:
                head.close()
        self.episodes = episodes
        from ..api import open_dataset

        self._source = (source, common, local is not None or bucket)
        self.dataset = open_dataset(source, episodes=episodes, delta_timestamps=deltas, **common)
        if local is not None and self._folder is None:
            from ..writing.export import exported_beside

            if exported_beside(self.dataset):  # a finalized recording: LeRobot's episode table (file locations)
                self._folder = local
        if self.root is None:
            self.root = Path(self.dataset.root)
        self.meta = self._make_meta(self.dataset.meta, self._episode_tasks, self.dataset.left_out)
        self._plan(download_videos)
        self._frames: Any = None
        self.reader = DatasetReader(self)

    def _open_if_needed(self) -> None:
        """A recorded dataset's reading side, opened on its store when first read (after ``finalize()``), with the
        reading attributes as they are then (``episodes``, ``delta_timestamps``, ``image_transforms``...)."""
        if self.dataset is None:
            self._check_readable()
            self._open(self.root, self.episodes, None, None, False, None, None, True)

    def _pushed_dataset(self) -> Any:
        """What ``push_to_hub`` publishes: the whole dataset, as LeRobot's uploads the whole folder at ``root``
        whatever ``episodes`` it was opened on. Its LeRobot files or store are all here (a local folder, a store, a
        bucket folder): every episode. A dataset downloaded from the Hub for some episodes is refused (LeRobot would
        upload a folder with only their files); once every episode is in the store, it is pushed whole."""
        if self.episodes is None:
            return self.dataset
        from ..api import open_dataset

        source, common, whole_here = self._source
        if whole_here:
            return open_dataset(source, **common)
        whole = open_dataset(self.dataset.root)
        if len(whole.episodes) < whole.meta.total_episodes:
            from ..errors import NotMaterializedError

            held, total = len(whole.episodes), whole.meta.total_episodes
            whole.close()
            raise NotMaterializedError(
                f"{self.repo_id}: push_to_hub publishes the whole dataset (LeRobot's uploads everything at root, "
                f"whatever episodes it was opened on), and only {held} of its {total} episodes were downloaded "
                f"from the Hub (this dataset was opened on episodes {self.episodes[:10]}"
                f"{'...' if len(self.episodes) > 10 else ''}): open LeRobotDataset({self.repo_id!r}) on every "
                f"episode first, or publish these episodes as a new dataset with lerobot_zarr's "
                f"ds.dataset.select([...]) then lerobot_zarr.push", path=self.dataset.root)
        return whole

    def _make_meta(self, meta: Any, episode_tasks: Callable[[], list[list[str]]] | None,
                   left_out: Iterable[str]) -> LeRobotDatasetMetadata:
        return LeRobotDatasetMetadata.of_store(meta, repo_id=self.repo_id, root=self.root, revision=self.revision,
                                               folder=self._folder, episode_tasks=episode_tasks, left_out=left_out)

    def _episode_tasks(self) -> list[list[str]]:
        return episode_tasks(self.dataset.meta)

    def _plan(self, download_videos: bool) -> None:
        """How each camera comes out of an item, decided once."""
        self._depth = set(self.meta.depth_keys)
        self._cameras = [k for k in self.meta.camera_keys if k in self.dataset.array_specs]
        self._rgb = {k for k in self._cameras if k not in self._depth}
        self._uint8_video = {k for k in self.meta.video_keys if self._return_uint8 and k in self._rgb}
        self._skip = set() if download_videos else set(self.meta.video_keys)
        if self._skip & set(self._cameras):
            from ..errors import warn_user

            warn_user(f"{self.repo_id}: download_videos=False: the video cameras {sorted(self._skip)} are left out "
                      f"of items")

    # -- LeRobot's properties ----------------------------------------------------------------------------------
    fps = property(lambda self: self.meta.fps)
    features = property(lambda self: self.meta.features)
    depth_output_unit = property(lambda self: self._depth_output_unit)

    @property
    def num_frames(self) -> int:
        """Frames of the selected episodes (while recording: of the saved episodes, LeRobot's ``meta.total_frames``)."""
        return self.meta.total_frames if self.dataset is None else len(self.dataset)

    @property
    def left_out(self) -> dict[str, str]:
        """The features of ``meta.features`` that items lack, each with why (lerobot_zarr's; warned at open)."""
        self._open_if_needed()
        skipped = {k: "download_videos=False" for k in sorted(self._skip)}
        return {**self.dataset.left_out, **skipped}

    @property
    def num_episodes(self) -> int:
        return len(self.episodes) if self.episodes is not None else self.meta.total_episodes

    def __len__(self) -> int:
        return self.num_frames

    # -- items -------------------------------------------------------------------------------------------------
    def __getitem__(self, idx: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        """Frame ``idx`` (negative from the end) as LeRobot's item, or a list of them for a slice."""
        self._open_if_needed()
        if isinstance(idx, slice):
            return [self[i] for i in range(*idx.indices(len(self)))]
        item = to_tensors(self._convert(self.dataset[operator.index(idx)], batch=False))
        if self.image_transforms is not None:
            for key in self._cameras:
                if key not in self._depth and key in item:
                    item[key] = self.image_transforms(item[key])
        return item

    def __getitems__(self, indices: list[int]) -> Sequence[dict[str, Any]]:
        """What a plain ``DataLoader(ds, batch_size=B)`` asks for: the batch in one ``get_batch`` (its values cast to
        LeRobot's dtypes once per column), handed to the collate function as items that share its columns, which
        ``default_collate`` takes back into LeRobot's batch in one step. With language columns, items of their own
        (views of the batch): LeRobot collates those with its own function (``lerobot_collate_fn``), which reads
        items one by one. With ``image_transforms``, which apply per item: item by item."""
        self._open_if_needed()
        if self.image_transforms is not None or not self.batched_fetch:
            return [self[i] for i in indices]
        batch = self._convert(self.dataset.get_batch(np.asarray(indices, dtype=np.int64)), batch=True)
        return batch_items(batch, shared=not self.meta.has_language_columns)

    def _convert(self, values: dict[str, Any], *, batch: bool) -> dict[str, Any]:
        """An item (or batch) of the store with LeRobot's values, still numpy: numbers cast to LeRobot's dtypes (one
        cast per column of a batch), cameras CHW float32 in [0, 1] (uint8 for RGB video with ``return_uint8``),
        depth CHW."""
        from ..cameras.images import to_float32_chw

        out: dict[str, Any] = {}
        for key, value in values.items():
            if key in self._skip:
                continue
            if key in self._rgb:
                value = np.moveaxis(value, -1, -3) if key in self._uint8_video else to_float32_chw(value)
            elif key in self._depth:
                value = np.moveaxis(value, -1, -3)  # float32 (..., H, W, 1) in the unit asked -> (..., 1, H, W)
            elif isinstance(value, (np.ndarray, np.generic)):
                value = _lerobot_dtype(value)
            out[key] = value
        names = self.meta.replaced_task_names
        if names is not None and "task_index" in out:  # LeRobot names the task from meta.tasks as it is now
            index = out["task_index"]
            out["task"] = [names[t] for t in index.tolist()] if batch else names[int(index)]
        return out

    @property
    def hf_dataset(self) -> Any:
        """The selected frames' stored values as a ``datasets.Dataset`` whose rows and columns come as LeRobot's
        ``hf_dataset`` gives them (tensors of LeRobot's dtypes, text as ``str``), made when first asked for, for code
        that reads it (``select_columns``, LeRobot's quantile-stats script...). Not LeRobot's Arrow table: cameras
        and language columns are not in it (items have them)."""
        self._open_if_needed()
        if self._frames is None:
            self._frames = _frame_table(self.dataset, self.meta.features, self.episodes)
        return self._frames

    def select_columns(self, column_names: str | list[str]) -> Any:
        """Those columns of :attr:`hf_dataset`."""
        return self.hf_dataset.select_columns(column_names)

    def get_raw_item(self, idx: int) -> dict:
        """Row ``idx`` of :attr:`hf_dataset`: the frame's values without windows, cameras or transforms."""
        return self.hf_dataset[idx]

    def set_image_transforms(self, image_transforms: Callable | None) -> None:
        """Replace the transform applied to the cameras (not depth) of each item."""
        if image_transforms is not None and not callable(image_transforms):
            raise TypeError("image_transforms must be callable or None.")
        self.image_transforms = image_transforms

    def clear_image_transforms(self) -> None:
        """Remove the transform applied to the cameras."""
        self.image_transforms = None

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({{\n    Repository ID: '{self.repo_id}',\n    Number of selected episodes: "
                f"'{self.num_episodes}',\n    Number of selected samples: '{self.num_frames}',\n    Features: "
                f"'{list(self.features)}',\n}})")


def _named_as_lerobot_dataset() -> None:
    """The recording methods (defined on the mixin :class:`.LeRobotRecording`) named ``LeRobotDataset.<method>``,
    as LeRobot's are: Python's own errors name the function by its qualified name (``LeRobotDataset.create() got an
    unexpected keyword argument ...``)."""
    for name, attr in vars(LeRobotRecording).items():
        function = attr.__func__ if isinstance(attr, (classmethod, staticmethod)) else attr
        if not name.startswith("_") and callable(function) and hasattr(function, "__code__"):
            function.__qualname__ = f"{LeRobotDataset.__name__}.{name}"


_named_as_lerobot_dataset()


class DatasetReader:
    """What LeRobot's ``DatasetReader`` (``dataset.reader``) offers for reading, over a drop-in: its counts, items,
    ``hf_dataset``, image transforms and the LeRobot files of the selected episodes. Not LeRobot's class: it reads
    nothing itself (the drop-in's store does)."""

    def __init__(self, dataset: LeRobotDataset):
        self._dataset = dataset

    root = property(lambda self: self._dataset.root)
    episodes = property(lambda self: self._dataset.episodes)
    num_frames = property(lambda self: self._dataset.num_frames)
    num_episodes = property(lambda self: self._dataset.num_episodes)
    hf_dataset = property(lambda self: self._dataset.hf_dataset)

    def get_item(self, idx: int) -> dict[str, Any]:
        """Item ``idx`` of the selected frames, as the dataset gives it."""
        return self._dataset[idx]

    def get_episodes_file_paths(self) -> list[str]:
        """The data and video files of the selected episodes, relative to ``root``, each once (a dataset read from
        a LeRobot folder, whose episode table says where they are)."""
        meta = self._dataset.meta
        episodes = self.episodes if self.episodes is not None else range(meta.total_episodes)
        paths = [str(meta.get_data_file_path(e)) for e in episodes]
        paths += [str(meta.get_video_file_path(e, key)) for key in meta.video_keys for e in episodes]
        return list(dict.fromkeys(paths))

    def set_image_transforms(self, image_transforms: Callable | None) -> None:
        self._dataset.set_image_transforms(image_transforms)

    def clear_image_transforms(self) -> None:
        self._dataset.clear_image_transforms()


def _filtered(meta: LeRobotDatasetMetadata, episodes: list[int] | None,
              episode_filter: Callable[[dict], bool]) -> list[int]:
    """LeRobot's ``episode_filter``: the episodes whose ``meta.episodes`` row it keeps (among ``episodes``)."""
    resolved = meta.filter_episodes(episode_filter, candidates=episodes)
    if not resolved:
        raise ValueError("The episode filter did not match any episode. Make sure the filter and episodes list are "
                         "valid and compatible.")
    logger.info(f"The episode filter matched {len(resolved)} episode(s).")
    return resolved


def _frame_table(ds: Any, features: Mapping[str, dict], episodes: Sequence[int] | None) -> Any:
    """The selected frames' values of every feature but the cameras and language columns, as a ``datasets.Dataset``
    with LeRobot's torch transform (one store read per episode and feature)."""
    import pyarrow as pa

    datasets = import_optional("datasets", "LeRobotDataset.hf_dataset (a datasets.Dataset, as LeRobot's)")
    from datasets.table import InMemoryTable

    from ..sampling.dataset import LeRobotZarrDataset

    keys = [k for k, ft in features.items() if ft["dtype"] not in (*CAMERA_DTYPES, "language")
            and k not in ds.left_out and k in ds.array_specs]
    columns: dict[str, list] = {k: [] for k in keys}
    with LeRobotZarrDataset(ds.root, episodes=episodes) as plain:
        for e in plain.episodes.tolist():
            for key, values in plain.episode(int(e), features=keys).items():
                columns[key].append(np.asarray(values))
    arrays = {}
    for key in keys:
        values = np.concatenate(columns[key]) if columns[key] else np.empty((0,))
        if tuple(features[key]["shape"]) == (1,):
            values = values.reshape(len(values))
        arrays[key] = _arrow_column(pa, values)
    table = datasets.Dataset(InMemoryTable(pa.table(arrays)))
    table.set_transform(_rows_as_torch)
    return table


def _arrow_column(pa: Any, values: np.ndarray) -> Any:
    """An (N, *shape) array as an Arrow column of N nested fixed-size lists (a plain column when 1-D)."""
    column = pa.array(values.reshape(-1))
    for size in reversed(values.shape[1:]):
        column = pa.FixedSizeListArray.from_arrays(column, size)
    return column


def _rows_as_torch(batch: dict[str, list]) -> dict[str, list]:
    """LeRobot's transform of ``hf_dataset`` rows: each value a tensor made by ``torch.tensor`` from its Python
    value (floats float32, integers int64), text and structured values as they are."""
    for key, values in batch.items():
        first = values[0] if values else None
        if first is None or isinstance(first, dict):
            continue
        batch[key] = [v if isinstance(v, str) else torch.tensor(v) for v in values]
    return batch


def _check_windowable(delta_timestamps: Mapping[str, Any] | None, features: Mapping[str, dict]) -> None:
    """What LeRobot refuses at every item, refused when the dataset is opened (before anything is fetched): a
    window over a feature the dataset lacks (its ``ValueError``), or over text (``string``, ``language``: LeRobot
    stacks a window's values into a tensor, its ``TypeError``)."""
    from ..errors import DeltaTimestampsError

    for key in delta_timestamps or {}:
        if key not in features:
            raise DeltaTimestampsError(f"Column {key!r} doesn't exist. (delta_timestamps names a feature the dataset "
                                       f"lacks; its features: {list(features)})", feature=str(key))
        dtype = features[key].get("dtype")
        if dtype in ("string", "language"):
            raise TypeError(f"delta_timestamps[{key!r}]: a {dtype} feature has no window (LeRobot's items stack a "
                            f"window into a tensor, which text cannot be)")


def _lerobot_dtype(value: np.ndarray | np.generic) -> np.ndarray | np.generic:
    """LeRobot's dtype for a stored number (what ``torch.tensor`` makes of the Python values its Arrow rows
    give): floats float32, integers int64, bools as they are."""
    kind = value.dtype.kind
    if kind == "f" and value.dtype != np.float32:
        return value.astype(np.float32)
    if kind in "iu" and value.dtype != np.int64:
        return value.astype(np.int64)
    return value


def _frame_deltas(delta_timestamps: Mapping[str, Sequence[float]] | None, fps: float,
                  tolerance_s: float) -> dict[str, list[float]] | None:
    """``delta_timestamps`` checked as LeRobot checks them (each a multiple of 1/fps within ``tolerance_s``, else
    ``ValueError``) and rounded to whole frames as LeRobot rounds them."""
    if delta_timestamps is None:
        return None
    outside = {key: [ts for ts in deltas if abs(ts * fps - round(ts * fps)) / fps > tolerance_s]
               for key, deltas in delta_timestamps.items()}
    outside = {key: bad for key, bad in outside.items() if bad}
    if outside:
        raise ValueError(f"The following delta_timestamps are found outside of tolerance range. Please make sure "
                         f"they are multiples of 1/{fps:g} +/- tolerance and adjust their values accordingly: "
                         f"{outside}")
    return {key: [round(ts * fps) / fps for ts in deltas] for key, deltas in delta_timestamps.items()}


def _edited_beside(store: Path) -> bool:
    """Whether LeRobot's files beside a finalized recording's store were changed since (by a LeRobot tool working in
    place: ``modify_tasks``, a language annotator...): the drop-in then reads them, as LeRobot's class does, and
    says so."""
    from ..errors import warn_user
    from ..writing.export import edited_beside

    edited = edited_beside(store) if is_store(store) else []
    if edited:
        warn_user(f"{store}: LeRobot's files beside this recorded store were changed since finalize() wrote them "
                  f"({edited[:3]}{'...' if len(edited) > 3 else ''}): read as they are now (as LeRobot's class "
                  f"reads them), not from the store; a resumed recording's finalize() will not write over them")
    return bool(edited)
