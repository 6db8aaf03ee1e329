"""Progress bars for long operations (transcodes, exports), honouring HF_HUB_DISABLE_PROGRESS_BARS."""

from __future__ import annotations

from typing import Any


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "frame") -> Any:
    """A progress bar honouring HF_HUB_DISABLE_PROGRESS_BARS, without tqdm's monitor thread (threads make a
    later fork, as in DataLoader workers, unsafe)."""
    from huggingface_hub.utils import tqdm

    class Bar(tqdm):
        monitor_interval = 0

    return Bar(total=total, desc=desc, unit=unit, unit_scale=True, disable=not enabled or None)
