"""Sampling: the dataset (``ds[i]``, ``get_batch``, :mod:`.dataset`) over memory maps of the packs (:mod:`.maps`),
episode selections (:mod:`.selection`), temporal windows (:mod:`.windows`), camera readers
(:mod:`.camera_readers`), what a dataset holds (:mod:`.meta`), its exports and publishing (:mod:`.conveniences`),
streams (:mod:`.streams`) and rank sharding (:mod:`.sharding`)."""

from ..utils.lazy import lazy_face

__all__ = ["DatasetMeta", "ImageFormat", "LeRobotZarrDataset", "EpisodeSelection", "episodes_for_rank",
           "split_episodes", "SampleStream", "stream", "window_offsets"]

__getattr__, __dir__ = lazy_face(__name__, {
    "DatasetMeta": "meta", "ImageFormat": "dataset", "LeRobotZarrDataset": "dataset",
    "EpisodeSelection": "selection", "episodes_for_rank": "sharding", "split_episodes": "sharding",
    "SampleStream": "streams", "stream": "streams", "window_offsets": "windows"
})
