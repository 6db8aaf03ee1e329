"""Shared pytest setup: import lerobot_zarr from this working tree."""

import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[1])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
