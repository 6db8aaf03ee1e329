"""Per-frame codecs of compact cameras. The face of :mod:`lerobot_zarr.cameras.frame_codecs`."""

from .cameras.frame_codecs import *  # noqa: F403
from .cameras.frame_codecs import __all__  # noqa: F401
