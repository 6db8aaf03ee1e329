"""Where a dataset comes from: one interface for every kind of source (a LeRobot folder, a Hub repo, a store, a
LeRobot folder or a store in a bucket), and a store in a bucket read without copying it (:mod:`.remote_store`)."""

from ..utils.lazy import lazy_face

__all__ = ["RemoteStore"]

__getattr__, __dir__ = lazy_face(__name__, {"RemoteStore": "remote_store"})
