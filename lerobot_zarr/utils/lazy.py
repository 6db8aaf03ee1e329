"""Package faces whose names load with their module on first use (PEP 562 ``__getattr__``): importing one module
of a layer, or ``lerobot_zarr`` itself, must not import what the layer's other modules need (pyarrow, the Hub
client, PyAV): a DataLoader worker reading a store pays for none of it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_face"]


def lazy_face(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``'s ``__init__``: ``where`` maps each public name to the
    submodule (relative to ``package``) that defines it."""

    def __getattr__(name: str) -> Any:  # noqa: N807
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        globals_ = importlib.import_module(package).__dict__
        globals_[name] = value  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(where) | set(importlib.import_module(package).__dict__))

    return __getattr__, __dir__
