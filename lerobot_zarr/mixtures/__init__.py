"""Mixtures of datasets: weighted, windowed, resumable on any number of ranks (:mod:`.mixture`), and the global
index schedule behind them (:mod:`.sampler`)."""

from .mixture import LeRobotZarrMixture, MixtureMeta, merge_stats, open_mixture
from .sampler import MixtureSampler, MixtureSchedule

__all__ = ["LeRobotZarrMixture", "MixtureMeta", "merge_stats", "open_mixture", "MixtureSampler", "MixtureSchedule"]
