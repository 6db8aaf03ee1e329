"""Shared pytest setup: import lerobot_zarr from this working tree; SVT-AV1 with one level of parallelism; the
suite's budget (3 GB of temp disk, 3 GB of RAM, 10 minutes on 2 cores: README "Developing").

How tests stay in the budget (use these for new tests):

- a passing test's ``tmp_path`` is deleted when it ends (``tmp_path_retention_policy = "failed"``, pyproject.toml);
- ``module_tmp``: a folder for a module's shared fixtures, deleted when the module is done (``tmp_path_factory``'s
  folders live until the session ends);
- ``g1_store``: G1-policy-train as one read-only store for every test that only reads it (camera at 24x32:
  13 MB instead of 1.35 GB per copy); a test that writes copies it first;
- the real datasets' cameras at full size only where the pixels are the point (tests/cameras/test_video.py);
- ``LEROBOT_ZARR_TEST_PROFILE=profile.tsv`` writes each test's seconds, peak temp disk and peak RSS
  (tests/_budget.py); ``scripts/measure_suite.sh`` measures the whole run.

No test writes into the user's store cache: ``$LEROBOT_ZARR_HOME`` points into the session's temp folder.
"""

import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

_REPO = str(Path(__file__).resolve().parents[1])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

# The same bytes as the encoder's default (~40 threads), which was seen to hang on a loaded 2-core machine.
os.environ.setdefault("LEROBOT_ZARR_SVTAV1_PARAMS", "lp=1")
_HOME = tempfile.mkdtemp(prefix="lerobot_zarr-tests-home-")
os.environ["LEROBOT_ZARR_HOME"] = _HOME  # tests that want another one set their own

import _budget  # noqa: E402  (tests/ is on sys.path: pytest puts a conftest's folder there)
from lerobot_recorded import lerobot_recorded  # noqa: E402, F401  (the session fixture: each kind recorded once)

from lerobot_zarr.utils.sched import drop_realtime  # noqa: E402

G1_CAM = "observation.images.cam_high"
G1_SMALL = (24, 32)  # the shared G1 store keeps its camera at this size


def pytest_configure(config):
    _budget.pytest_configure(config)


def pytest_runtest_teardown(item, nextitem):
    # LeRobot's own recorder (lerobot_recorded, the LeRobot-side tests) encodes with SVT-AV1 in this process, which
    # leaves its threads at real-time priority when run by root: the rest of the worker's tests would run so
    drop_realtime()
    if nextitem is None or nextitem.module is not item.module:  # a module's garbage is not kept for the next
        _budget.release_freed_memory()


def pytest_unconfigure(config):
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory, request):
    """A folder for a module's shared fixtures (sources, stores, a Hub server's storage), deleted when the
    module's tests are done."""
    path = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def g1_store(tmp_path_factory):
    """G1-policy-train (../shared/datasets) as a store shared by the tests that only read it: all 100 episodes,
    the camera decoded where its mp4 exists (episodes 1, 2, 4, 5) and kept at 24x32 (13 MB). Made once per run:
    pytest-xdist's workers share it (the first to need it makes it, under a file lock; decoding G1's AV1 camera is
    the costly part). Read only: the session fails if a test changed it (copy it to write: ``shutil.copytree``)."""
    import fcntl

    from hub_fixtures import real_dataset

    import lerobot_zarr

    src = real_dataset("G1-policy-train")
    pytest.importorskip("av")
    workers = os.environ.get("PYTEST_XDIST_WORKER")
    # with xdist, the parent of a worker's base temp folder is the run's, the same for every worker
    base = tmp_path_factory.getbasetemp().parent / "g1_shared" if workers else tmp_path_factory.mktemp("g1_shared")
    base.mkdir(exist_ok=True)
    root = base / "store"
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker making it: wait until it is made
        if not (base / "made").exists():
            shutil.rmtree(root, ignore_errors=True)  # a worker failed while making it
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", lerobot_zarr.LeRobotZarrWarning)
                lerobot_zarr.open_dataset(src, root=root, resize={G1_CAM: G1_SMALL}, progress=False).close()
            (base / "made").touch()
    committed = (root / "zarr.json").read_bytes()
    yield root
    assert (root / "zarr.json").read_bytes() == committed, "a test changed the shared G1 store (copy it first)"
    if not workers:  # (xdist: another worker may still read it; 13 MB in the run's temp folder, removed with it)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def other_fs(tmp_path):
    """A folder on another filesystem than ``tmp_path`` (a tmpfs such as ``/dev/shm``: files moved between the two
    cannot be hard-linked, renamed or ``copy_file_range``d), deleted when the test ends; the test is skipped where
    the machine has none the test may write to."""
    here = os.stat(tmp_path).st_dev
    for base in ("/dev/shm", f"/run/user/{os.getuid()}", "/tmp", "/var/tmp"):
        try:
            if os.stat(base).st_dev == here or not os.access(base, os.W_OK | os.X_OK):
                continue
            path = Path(tempfile.mkdtemp(prefix="lerobot_zarr-test-", dir=base))
        except OSError:
            continue
        yield path
        shutil.rmtree(path, ignore_errors=True)
        return
    pytest.skip("no writable folder on another filesystem than the test's temp folder (/dev/shm, /run/user, /tmp "
                "and /var/tmp are on the same one or not writable)")
