"""Per-test resource profile of the suite (a pytest plugin that conftest loads; off unless asked for).

``LEROBOT_ZARR_TEST_PROFILE=profile.tsv pytest ...`` samples, every second in a background thread, the disk taken
by the temp folder (``$TMPDIR``: give the run a private one) and the resident memory of this process and its
children, and writes per test: seconds, peak temp disk, temp disk left when it ended (what it keeps for later
tests), peak RSS (MiB). The end of the run prints the tests that take the most of each. The suite's budget
(docs: README "Developing") is 3 GB of temp disk and 3 GB of RSS at any moment, 10 minutes on 2 cores;
``scripts/measure_suite.sh`` measures the whole run from outside.
"""

from __future__ import annotations

import os
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


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants (Linux /proc; 0 elsewhere)."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        parent[int(name)] = int(fields[1])
        rss[int(name)] = int(fields[21]) * page
    total, todo = 0, [pid]
    children: dict[int, list[int]] = {}
    for child, ppid in parent.items():
        children.setdefault(ppid, []).append(child)
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, ()))
    return total


class _Profile:
    def __init__(self, out: Path):
        self.out = out
        self.tmp = tempfile.gettempdir()
        self.rows: list[tuple[str, float, int, int, int]] = []
        self.current: str | None = None
        self.peak_disk = self.peak_rss = 0
        self.run_disk = self.run_rss = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._sample, name="test-budget", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self.measure()

    def measure(self) -> tuple[int, int]:
        disk, rss = disk_bytes(self.tmp), tree_rss_bytes(os.getpid())
        with self._lock:
            self.peak_disk, self.peak_rss = max(self.peak_disk, disk), max(self.peak_rss, rss)
            self.run_disk, self.run_rss = max(self.run_disk, disk), max(self.run_rss, rss)
        return disk, rss

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        disk, rss = self.measure()
        with self._lock:
            self.peak_disk, self.peak_rss = disk, rss
        start = time.monotonic()
        yield
        seconds = time.monotonic() - start
        end_disk, _ = self.measure()
        with self._lock:
            self.rows.append((item.nodeid, seconds, self.peak_disk, end_disk, self.peak_rss))

    def pytest_sessionfinish(self, session):
        self._stop.set()
        self._thread.join()
        lines = ["test\tseconds\tpeak_disk_mib\tend_disk_mib\tpeak_rss_mib"]
        lines += [f"{n}\t{s:.1f}\t{d / _MIB:.0f}\t{e / _MIB:.0f}\t{r / _MIB:.0f}" for n, s, d, e, r in self.rows]
        self.out.write_text("\n".join(lines) + "\n")

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.section("resource profile (tests/_budget.py)")
        tr.write_line(f"whole run: peak temp disk {self.run_disk / _MIB:.0f} MiB, peak RSS of the process tree "
                      f"{self.run_rss / _MIB:.0f} MiB; per test in {self.out}")
        for title, key in (("temp disk (MiB, peak)", 2), ("temp disk kept at the end (MiB)", 3),
                           ("RSS (MiB, peak)", 4), ("seconds", 1)):
            top = sorted(self.rows, key=lambda r: r[key], reverse=True)[:8]
            scale = 1 if key == 1 else _MIB
            tr.write_line(f"most {title}: " + "; ".join(f"{r[0]} {r[key] / scale:.0f}" for r in top))


def pytest_configure(config):
    out = os.environ.get(PROFILE_ENV)
    if out:
        out = Path(out).resolve()
        worker = os.environ.get("PYTEST_XDIST_WORKER")  # pytest-xdist (-n): one file per worker, FILE-gw0.tsv...
        if worker:
            out = out.with_name(f"{out.stem}-{worker}{out.suffix}")
        config.pluginmanager.register(_Profile(out), "lerobot_zarr_budget")
