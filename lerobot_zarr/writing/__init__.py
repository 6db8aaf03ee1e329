"""Writing: transcoding a LeRobot source into a store (:mod:`.transcode`), the writable dataset (:mod:`.writer`),
RL transitions as episodes (:mod:`.transitions`), export and push as LeRobot v3.0 (:mod:`.export`) and
``verify`` (:mod:`.integrity`)."""

from .export import push, to_lerobot
from .integrity import VerifyReport, verify
from .transitions import TransitionBuffer
from .writer import WritableDataset, create, fork

__all__ = ["push", "to_lerobot", "VerifyReport", "verify", "TransitionBuffer", "WritableDataset",
           "create", "fork"]
