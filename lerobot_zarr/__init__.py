"""lerobot_zarr: LeRobot datasets as local, episode-chunked Zarr v3 stores sampled through memory maps.

Start with :func:`open_dataset`. The store layout is documented in :mod:`lerobot_zarr.store`.
"""

import logging as _logging
import os as _os
import sys as _sys

# Episode chunks use zarr's rectilinear chunk grid, an extension zarr 3.4 keeps off by default; readers of our
# stores (zarr, xarray) need it, so turn it on for this process. zarr reads the variable when it is imported.
_os.environ.setdefault("ZARR_ARRAY__RECTILINEAR_CHUNKS", "True")
if "zarr" in _sys.modules:
    _sys.modules["zarr"].config.set({"array.rectilinear_chunks": True})

from .api import cache_home, inspect, open_dataset
from .errors import *  # noqa: F403  (the curated list is errors.__all__)
from .errors import __all__ as _errors
from .mixtures.mixture import LeRobotZarrMixture, MixtureMeta, open_mixture
from .mixtures.sampler import MixtureSampler
from .sampling.dataset import LeRobotZarrDataset
from .sampling.meta import DatasetMeta
from .sampling.sharding import episodes_for_rank, split_episodes
from .sampling.streams import SampleStream, stream
from .sources.cache import cache_info
from .writing.integrity import VerifyReport, verify
from .writing.writer import WritableDataset, create

__all__ = [
    "open_dataset",
    "open_mixture",
    "create",
    "inspect",
    "stream",
    "episodes_for_rank",
    "split_episodes",
    "SampleStream",
    "cache_home",
    "cache_info",
    "LeRobotZarrDataset",
    "LeRobotZarrMixture",
    "MixtureMeta",
    "MixtureSampler",
    "WritableDataset",
    "DatasetMeta",
    "verify",
    "VerifyReport",
    *_errors,
]
__version__ = "0.1.0"

# a library logs, its application decides where to: nothing is printed unless a handler is configured
_logging.getLogger("lerobot_zarr").addHandler(_logging.NullHandler())
