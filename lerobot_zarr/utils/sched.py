"""Keep our threads under the normal scheduler. SVT-AV1 (LeRobot's default encoder, ``libsvtav1``), run by root as in
most containers, puts the thread that opens an encoder and the ~40 threads it starts under ``SCHED_FIFO`` at
priority 99: a recorder or a test worker that encodes once then runs its encoders, and everything it does after, at
real-time priority, and on a small machine every other process waits (seen: a 2-core machine at load 49 with
processes making no progress for 15 minutes). :func:`no_realtime` puts back what such a call changed."""

import contextlib
import logging
import os
from collections.abc import Iterator

logger = logging.getLogger(__name__)
_warned: list[int] = []
_REALTIME = frozenset(getattr(os, name) for name in ("SCHED_FIFO", "SCHED_RR") if hasattr(os, name))


def thread_policies() -> dict[int, int]:
    """The scheduling policy of each thread of this process, by thread id (threads that end while read are left
    out); empty where the system cannot tell."""
    policies = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return policies
    for tid in tids:
        with contextlib.suppress(OSError, ValueError):
            policies[int(tid)] = os.sched_getscheduler(int(tid))
    return policies


def drop_realtime(policy: int | None = None, keep: frozenset[int] | set[int] = frozenset(),
                  priority: int = 0) -> list[int]:
    """Put every real-time thread of this process (but those in ``keep``) under ``policy`` (default: the normal
    one) at ``priority``; return their ids. A thread that cannot be moved is logged once."""
    policy = getattr(os, "SCHED_OTHER", 0) if policy is None else policy
    moved = []
    for tid, now in thread_policies().items():
        if now in _REALTIME and tid not in keep:
            try:
                os.sched_setscheduler(tid, policy, os.sched_param(priority))
            except OSError as exc:
                if not _warned:
                    _warned.append(tid)
                    logger.warning("thread %d stays at real-time priority (%s): it may starve other processes",
                                   tid, exc)
            else:
                moved.append(tid)
    return moved


@contextlib.contextmanager
def no_realtime() -> Iterator[None]:
    """Run a call that may raise threads to real-time priority (opening an SVT-AV1 encoder), then put every thread
    of this process that is real-time afterwards, and was not before, back to the policy and priority the calling
    thread had (the normal one, or ``SCHED_BATCH`` in a background encoder)."""
    before = thread_policies()
    own = before.get(_gettid(), getattr(os, "SCHED_OTHER", 0))
    priority = os.sched_getparam(0).sched_priority if own in _REALTIME else 0
    try:
        yield
    finally:
        drop_realtime(own, keep={tid for tid, policy in before.items() if policy in _REALTIME}, priority=priority)
        if own in _REALTIME:  # the caller's own priority, which the call may have raised
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, own, os.sched_param(priority))


def _gettid() -> int:
    return getattr(os, "gettid", os.getpid)()
