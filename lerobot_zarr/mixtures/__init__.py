"""Mixtures of datasets: weighted, windowed, resumable on any number of ranks (:mod:`.mixture`), and the global
index schedule behind them (:mod:`.sampler`)."""

from ..utils.lazy import lazy_face

__all__ = ["LeRobotZarrMixture", "MixtureMeta", "merge_stats", "open_mixture", "MixtureSampler", "MixtureSchedule"]

__getattr__, __dir__ = lazy_face(__name__, {
    "LeRobotZarrMixture": "mixture", "MixtureMeta": "mixture", "merge_stats": "mixture", "open_mixture": "mixture",
    "MixtureSampler": "sampler", "MixtureSchedule": "sampler"
})
