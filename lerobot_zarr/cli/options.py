"""Argument types shared by the commands: episode lists and per-camera settings (bad input is a usage error)."""

from __future__ import annotations

import argparse

from ..store.tables import MAX_EPISODES

__all__ = ["camera_option", "camera_size", "episode_list"]


def episode_list(text: str) -> list[int]:
    """``"0,3,5-9"`` -> ``[0, 3, 5, 6, 7, 8, 9]``."""
    out: list[int] = []
    try:
        for part in text.split(","):
            a, dash, b = part.strip().partition("-")
            if dash and not b:
                raise ValueError(part)
            if dash and int(b) < int(a):
                raise ValueError(part)
            if (int(b) + 1 - int(a) if dash else 1) + len(out) > MAX_EPISODES:  # before making the list
                raise argparse.ArgumentTypeError(f"{text!r:.80}: more than {MAX_EPISODES} episodes (a store holds "
                                                 f"at most that many)")
            out.extend(range(int(a), int(b) + 1) if dash else [int(a)])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r:.80}: expected episode indices like 0,3,5-9") from None
    return out


def camera_option(text: str) -> tuple[str, str]:
    """``CAMERA=VALUE`` -> ``(camera, value)``; the camera name may itself hold ``=``."""
    camera, sep, value = text.rpartition("=")
    if not sep or not camera or not value:
        raise argparse.ArgumentTypeError(f"expected CAMERA=VALUE, got {text!r}")
    return camera, value


def camera_size(text: str) -> tuple[str, tuple[int, int]]:
    """``CAMERA=HxW`` -> ``(camera, (height, width))``."""
    camera, value = camera_option(text)
    height, sep, width = value.lower().partition("x")
    if not sep or not height.isdigit() or not width.isdigit():
        raise argparse.ArgumentTypeError(f"expected CAMERA=HxW such as cam=224x224, got {text!r}")
    return camera, (int(height), int(width))
