"""The torch adapter (``pip install lerobot_zarr[torch]``): tensors, ``batch_loader``, ``stream_loader`` and the
``LeRobotDataset`` drop-in. The face of :mod:`lerobot_zarr.integrations.torch`."""

from .integrations.torch import *  # noqa: F403
from .integrations.torch import __all__  # noqa: F401
