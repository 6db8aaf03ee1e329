"""Per-test resource profile of the suite (a pytest plugin that conftest loads; off unless asked for).

``LEROBOT_ZARR_TEST_PROFILE=profile.tsv pytest ...`` samples, every second in a background thread, the disk taken
by the temp folder (``$TMPDIR``: give the run a private one) and the memory of this process and its children
(RSS, and PSS: a page that forked processes share counted once), and writes per test (from the samples taken while
it ran, and the last one before): seconds, peak temp disk, temp disk left when it ended (what it keeps for later
tests), peak RSS and PSS (MiB), when it started (seconds since the worker's start: with ``-n 2``, when each
worker ended), the CPU time this process took meanwhile, all its threads (an in-process server's too) but the
sampler's, and the CPU time of the child processes it ran and waited for (subprocesses, worker pools): on a loaded
machine a test's seconds mostly say how long it waited for a CPU, its CPU time what it costs. The end of the run
prints the tests that take the most. The suite's budget (docs: README
"Developing") is 3 GB of temp disk and 3 GB of RAM (the process tree's PSS) at any moment, 10 minutes on 2 cores;
``scripts/measure_suite.sh`` measures the whole run from outside.
"""

from __future__ import annotations

import os
import resource
import tempfile
import threading
import time
from pathlib import Path

import pytest

PROFILE_ENV = "LEROBOT_ZARR_TEST_PROFILE"
_MIB = 1 << 20


def disk_bytes(root: str | os.PathLike) -> int:
    """Bytes of disk the files under ``root`` take (allocated blocks: sparse files count what they hold)."""
    total = 0
    stack = [str(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
    return total


def tree_memory_bytes(pid: int) -> tuple[int, int]:
    """Resident memory of ``pid`` and all its descendants (Linux /proc; 0 elsewhere), as (RSS, PSS): the sum of
    the processes' RSS counts a page that forked processes share once per process; their PSS (proportional set
    size) counts it once in all, the RAM the tree takes."""
    parent: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0, 0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        parent[int(name)] = int(fields[1])
    children: dict[int, list[int]] = {}
    for child, ppid in parent.items():
        children.setdefault(ppid, []).append(child)
    rss = pss = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, ()))
        try:
            with open(f"/proc/{p}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith(b"Pss:"):
                        pss += int(line.split()[1]) * 1024
        except OSError:  # ended meanwhile, or no smaps_rollup (kernels before 4.14): its RSS from stat
            try:
                with open(f"/proc/{p}/stat", "rb") as f:
                    value = int(f.read().rsplit(b")", 1)[1].split()[21]) * page
                rss, pss = rss + value, pss + value
            except OSError:
                continue
    return rss, pss


def release_freed_memory() -> None:
    """Collect garbage and hand the C heap's free pages back to the system (glibc's ``malloc_trim``)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _children_cpu() -> float:
    """CPU seconds (user and system) of this process's children that ended and were waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class _Profile:
    def __init__(self, out: Path):
        self.out = out
        self.tmp = tempfile.gettempdir()
        self.rows: list[tuple[str, float, int, int, int, int, float, float, float]] = []
        self.started = time.monotonic()
        self.peak = [0, 0, 0]  # this test's peak temp disk, RSS, PSS
        self.run = [0, 0, 0]  # the run's
        self.last = [0, 0, 0]  # the latest measure
        self.sampler_cpu = 0.0  # the CPU time the samples took (left out of the tests')
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._sample, name="test-budget", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self.measure()

    def measure(self) -> None:
        cpu = time.thread_time()
        now = [disk_bytes(self.tmp), *tree_memory_bytes(os.getpid())]
        cpu = time.thread_time() - cpu
        with self._lock:
            self.sampler_cpu += cpu
            self.last = now
            self.peak = [max(a, b) for a, b in zip(self.peak, now)]
            self.run = [max(a, b) for a, b in zip(self.run, now)]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        # from the background samples only (a second apart): walking the temp folder at each test's start and end
        # slowed a run of the suite by minutes
        with self._lock:
            self.peak = list(self.last)
            start, cpu = time.monotonic(), time.process_time() - self.sampler_cpu
            children = _children_cpu()
        yield
        with self._lock:
            seconds, cpu = time.monotonic() - start, time.process_time() - self.sampler_cpu - cpu
            self.rows.append((item.nodeid, seconds, self.peak[0], self.last[0], self.peak[1], self.peak[2],
                              start - self.started, cpu, _children_cpu() - children))

    def pytest_sessionfinish(self, session):
        self._stop.set()
        self._thread.join()
        columns = ("test", "seconds", "peak_disk_mib", "end_disk_mib", "peak_rss_mib", "peak_pss_mib", "started_s",
                   "cpu_s", "children_cpu_s")
        lines = ["\t".join(columns)]
        lines += [f"{n}\t{s:.1f}\t{d / _MIB:.0f}\t{e / _MIB:.0f}\t{r / _MIB:.0f}\t{p / _MIB:.0f}\t{t:.1f}\t{c:.1f}"
                  f"\t{k:.1f}" for n, s, d, e, r, p, t, c, k in self.rows]
        self.out.write_text("\n".join(lines) + "\n")

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.section("resource profile (tests/_budget.py)")
        disk, rss, pss = (v / _MIB for v in self.run)
        tr.write_line(f"whole run: peak temp disk {disk:.0f} MiB, peak memory of the process tree: RSS {rss:.0f} "
                      f"MiB, PSS {pss:.0f} MiB; per test in {self.out}")
        for title, key in (("temp disk (MiB, peak)", 2), ("temp disk kept at the end (MiB)", 3),
                           ("PSS (MiB, peak)", 5), ("seconds", 1), ("CPU seconds", 7),
                           ("CPU seconds of child processes", 8)):
            top = sorted(self.rows, key=lambda r: r[key], reverse=True)[:8]
            scale, digits = (1, 1 if key > 1 else 0) if key in (1, 7, 8) else (_MIB, 0)
            tr.write_line(f"most {title}: " + "; ".join(f"{r[0]} {r[key] / scale:.{digits}f}" for r in top))


def pytest_configure(config):
    out = os.environ.get(PROFILE_ENV)
    if out:
        out = Path(out).resolve()
        worker = os.environ.get("PYTEST_XDIST_WORKER")  # pytest-xdist (-n): one file per worker, FILE-gw0.tsv...
        if worker:
            out = out.with_name(f"{out.stem}-{worker}{out.suffix}")
        config.pluginmanager.register(_Profile(out), "lerobot_zarr_budget")
