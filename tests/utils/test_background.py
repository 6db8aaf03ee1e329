"""The budget of bytes under way at once (requests sharing one link)."""

from __future__ import annotations

import threading
import time

import pytest

from lerobot_zarr.utils.background import ByteBudget


def test_holders_never_exceed_the_budget_and_a_larger_piece_runs_alone():
    budget, lock, under_way, over = ByteBudget(10), threading.Lock(), [0], []
    go = threading.Barrier(6, timeout=60)

    def work(size: int) -> None:
        go.wait()
        for _ in range(20):
            with budget.held(size, 60):
                with lock:
                    under_way[0] += size
                    if under_way[0] > 10 and under_way[0] != size:  # (one piece over the budget runs alone)
                        over.append(under_way[0])
                time.sleep(0.001)  # (held a moment: the others try meanwhile)
                with lock:
                    under_way[0] -= size

    threads = [threading.Thread(target=work, args=(size,)) for size in (3, 4, 5, 6, 7, 25)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and budget.used == 0 and over == []


def test_a_budget_not_freed_in_time_raises_the_error_given():
    budget = ByteBudget(10)
    with budget.held(8, 1):
        with pytest.raises(OSError, match="8 bytes of work under way"):
            with budget.held(5, 0.05, OSError):
                pass
    assert budget.used == 0
