"""Threads stay under the normal scheduler: SVT-AV1 (LeRobot's default encoder) run by root puts the thread that
opens an encoder and its own threads under SCHED_FIFO 99, which starved this project's 2-core machines (processes
at real-time priority spinning while everything else waited). Where the process cannot make a thread real-time
(not root, no CAP_SYS_NICE), SVT-AV1 cannot either and the staged test is skipped."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from lerobot_zarr.utils.sched import no_realtime, thread_policies


def _can_go_realtime() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True


def test_threads_made_realtime_in_the_block_are_put_back_and_others_kept():
    if not _can_go_realtime():
        pytest.skip("this process may not use real-time scheduling (not root, no CAP_SYS_NICE)")
    ready, release, tids = threading.Event(), threading.Event(), []

    def sleeper() -> None:
        tids.append(threading.get_native_id())
        ready.set()
        release.wait(60)

    other = threading.Thread(target=sleeper)
    other.start()
    try:
        assert ready.wait(60)
        own = threading.get_native_id()
        with no_realtime():  # as SVT-AV1 does: the caller and a thread of the process
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            os.sched_setscheduler(tids[0], os.SCHED_RR, os.sched_param(1))
        policies = thread_policies()
        assert policies[own] == os.SCHED_OTHER
        assert policies[tids[0]] == os.SCHED_OTHER

        os.sched_setscheduler(tids[0], os.SCHED_BATCH, os.sched_param(0))
        with no_realtime():  # a thread that was not made real-time keeps its policy; the caller's is restored
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        assert thread_policies()[tids[0]] == os.SCHED_BATCH
        assert thread_policies()[own] == os.SCHED_OTHER
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        release.set()
        other.join(60)


def test_encoding_av1_leaves_no_thread_at_realtime_priority(tmp_path):
    pytest.importorskip("av", reason="PyAV (lerobot_zarr[video]) is not installed")
    if not _can_go_realtime():
        pytest.skip("this process may not use real-time scheduling (not root, no CAP_SYS_NICE): nor may SVT-AV1")
    from lerobot_zarr.cameras.video import VideoWriter

    writer = VideoWriter(tmp_path / "v.mp4", 30, 64, 48)
    try:
        writer.add(np.zeros((4, 48, 64, 3), np.uint8))
        realtime = {tid for tid, policy in thread_policies().items() if policy in (os.SCHED_FIFO, os.SCHED_RR)}
        assert not realtime, f"threads left at real-time priority by the encoder: {sorted(realtime)}"
    finally:
        writer.close()
