"""Shared pytest setup: import lerobot_zarr from this working tree; SVT-AV1 with one level of parallelism; the
resource profile of ``LEROBOT_ZARR_TEST_PROFILE`` (tests/_budget.py)."""

import os
import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[1])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

# The same bytes as the encoder's default (~40 threads), which was seen to hang on a loaded 2-core machine.
os.environ.setdefault("LEROBOT_ZARR_SVTAV1_PARAMS", "lp=1")

import _budget  # noqa: E402  (tests/ is on sys.path: pytest puts a conftest's folder there)


def pytest_configure(config):
    _budget.pytest_configure(config)
