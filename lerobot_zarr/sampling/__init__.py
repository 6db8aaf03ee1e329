"""Sampling: the dataset (``ds[i]``, ``get_batch``, :mod:`.dataset`) over memory maps of the packs (:mod:`.maps`),
episode selections (:mod:`.selection`), temporal windows (:mod:`.windows`), camera readers
(:mod:`.camera_readers`), streams (:mod:`.streams`) and rank sharding (:mod:`.sharding`)."""

from .dataset import DatasetMeta, ImageFormat, LeRobotZarrDataset
from .selection import EpisodeSelection
from .sharding import episodes_for_rank, split_episodes
from .streams import SampleStream, stream
from .windows import window_offsets

__all__ = ["DatasetMeta", "ImageFormat", "LeRobotZarrDataset", "EpisodeSelection", "episodes_for_rank",
           "split_episodes", "SampleStream", "stream", "window_offsets"]
