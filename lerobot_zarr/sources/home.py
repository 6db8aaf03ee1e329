"""Where the cache of stores is (:func:`cache_home`), and where a store made with other camera choices goes."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "MIRROR_MARKER", "cache_home", "variant_path", "mirror_home"]

CACHE_ENV = "LEROBOT_ZARR_HOME"
#: in the local mirror of a store in a bucket (its URL): the mirror holds only the rows read, so it is never opened
#: as a local store (its other rows would read as zeros)
MIRROR_MARKER = ".lerobot_zarr-mirror"


def cache_home() -> Path:
    """Where stores go when no ``root`` is given: ``$LEROBOT_ZARR_HOME``, else ``$HF_HOME/lerobot_zarr``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME).expanduser() / "lerobot_zarr"


def variant_path(store: Path, key: str | None) -> Path:
    """The store of a source kept with other camera choices (``key``, a digest of them; None: the plain store): a
    folder of its own next to the plain one, so that ``storage=``/``resize=`` never change what plain opens read."""
    return store if key is None else store.with_name(f"{store.name}+{key}")


def mirror_home() -> Path:
    """Where the processes reading stores in buckets keep their mirrors (one per commit, shared by the processes of
    the machine reading it, removed when the last lets go)."""
    return cache_home() / "mirrors"
