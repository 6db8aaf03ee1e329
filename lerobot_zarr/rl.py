"""LeRobot's RL replay buffer on a store (``pip install lerobot_zarr[torch]``). The face of
:mod:`lerobot_zarr.integrations.rl`."""

from .integrations.rl import *  # noqa: F403
from .integrations.rl import __all__  # noqa: F401
