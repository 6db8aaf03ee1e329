"""Where a dataset comes from: one interface for every kind of source (:mod:`.base`), the kinds (a store or a
LeRobot folder on this machine :mod:`.local`, a Hub repo :mod:`.hub`, a folder of a bucket :mod:`.bucket`) and their
registry (:mod:`.registry`), what a ``source`` argument names (:mod:`.resolve`), a store in a bucket read without
copying it (:mod:`.remote_store`), and the cache of stores (:mod:`.home`, :mod:`.cache`)."""

from ..utils.lazy import lazy_face

__all__ = ["Source", "register", "kinds", "resolve_source", "RemoteStore", "cache_home", "cache_info",
           "describe_record", "kind_of_record"]

__getattr__, __dir__ = lazy_face(__name__, {
    "Source": "base", "register": "base", "kinds": "registry", "describe_record": "registry",
    "kind_of_record": "registry", "resolve_source": "resolve", "RemoteStore": "remote_store", "cache_home": "home",
    "cache_info": "cache",
})
