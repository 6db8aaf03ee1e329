"""Progress bars for long operations (transcodes, exports), honouring HF_HUB_DISABLE_PROGRESS_BARS."""

from __future__ import annotations

from typing import Any


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "frame") -> Any:
    """A progress bar honouring HF_HUB_DISABLE_PROGRESS_BARS, without tqdm's monitor thread (threads make a
    later fork, as in DataLoader workers, unsafe). Disabled: tqdm's plain class (huggingface_hub's imports
    ``tqdm.auto`` and so asyncio, ~0.1 s, on a path as short as a one-episode open)."""
    if not enabled:
        from tqdm.std import tqdm as plain

        return plain(total=total, desc=desc, unit=unit, disable=True)
    from huggingface_hub.utils import tqdm

    class Bar(tqdm):
        monitor_interval = 0

    return Bar(total=total, desc=desc, unit=unit, unit_scale=True, disable=None)
