"""The command line, ``lerobot-zarr``: :mod:`.app` assembles the parser and runs a command; one module per
command group (:mod:`.info`, :mod:`.convert`, :mod:`.view`, :mod:`.edit`, :mod:`.push`, :mod:`.verify`,
:mod:`.cache`, :mod:`.demo`), with the argument types (:mod:`.options`) and text helpers (:mod:`.text`) they share."""

from .app import build_parser, main

__all__ = ["build_parser", "main"]
