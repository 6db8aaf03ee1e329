"""Registering lerobot_zarr's zarr codecs (:mod:`lerobot_zarr.cameras.zarr_codecs`) with zarr-python: at once if zarr is imported,
else right after zarr's import, so that zarr and xarray read compressed cameras whatever was imported first
(lerobot_zarr itself never imports zarr)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from .frame_codecs import DELTA_CODEC, JPEG_CODEC

__all__ = ["register_zarr_codecs", "register_when_zarr_is_imported"]

_registered = False


def register_zarr_codecs() -> None:
    """Register ``lerobot_zarr.delta`` and ``lerobot_zarr.jpeg`` with zarr-python (idempotent)."""
    global _registered
    if _registered:
        return
    from zarr.registry import register_codec

    from . import zarr_codecs as _zarr_codecs

    register_codec(DELTA_CODEC, _zarr_codecs.DeltaCodec)
    register_codec(JPEG_CODEC, _zarr_codecs.JpegCodec)
    _registered = True


def register_when_zarr_is_imported() -> None:
    """Register the zarr codecs now if zarr is imported, else right after zarr's import (lerobot_zarr itself
    never imports zarr: reading a store with zarr or xarray must not need the import to come first)."""
    if "zarr" in sys.modules:
        register_zarr_codecs()
    elif not any(isinstance(f, _AfterZarrImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterZarrImport())


class _AfterZarrImport:
    """One-shot import hook (a meta path finder: ``find_spec`` is all the import system asks of one; not derived
    from ``importlib.abc.MetaPathFinder``, whose import pulls in ``importlib.resources``): runs
    :func:`register_zarr_codecs` once the ``zarr`` package has been executed."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "zarr":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            register_zarr_codecs()

        spec.loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec
