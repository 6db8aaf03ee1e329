"""The command line: ``lerobot-zarr`` (:mod:`.app`) and its demo (:mod:`.demo`)."""

from .app import main

__all__ = ["main"]
