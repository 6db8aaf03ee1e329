"""Writing: transcoding a LeRobot source into a store (:mod:`.transcode`, the cameras kept as asked:
:mod:`.camera_choices`), the writable dataset (:mod:`.writer`: a
reader plus its write transaction, :mod:`.transaction`; in-place edits, :mod:`.edits`; value checks,
:mod:`.values`; a copy sharing its packs, :mod:`.forks`), RL transitions as episodes (:mod:`.transitions`, their layout :mod:`.transition_layout`, the committed ones
read by :mod:`.transition_store`), export
and push as LeRobot v3.0 (:mod:`.export`) and ``verify`` (:mod:`.integrity`)."""

from ..utils.lazy import lazy_face

__all__ = ["push", "to_lerobot", "VerifyReport", "verify", "TransitionBuffer", "WritableDataset", "create", "fork"]

__getattr__, __dir__ = lazy_face(__name__, {
    "push": "export", "to_lerobot": "export", "VerifyReport": "integrity", "verify": "integrity",
    "TransitionBuffer": "transitions", "WritableDataset": "writer", "create": "writer", "fork": "forks"
})
