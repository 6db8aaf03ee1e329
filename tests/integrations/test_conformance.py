"""scripts/conformance.py and its pytest plugin, which run LeRobot's own tests against the drop-ins. The plugin's
tests need lerobot; the script's run on LeRobot's tests needs LeRobot's sources too (``$LEROBOT_SOURCES``, default
``../lerobot-v0.6.1`` next to this checkout), else they skip."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "conformance.py"


# The subprocesses' timeouts only stop a hang: on a loaded machine importing torch and lerobot alone took minutes.
def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "scripts"), str(REPO)]))


def test_without_lerobots_sources_the_script_says_so(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0 and "skipped" in proc.stdout and "tests/conftest.py" in proc.stdout, proc


def test_a_module_that_fails_to_collect_is_an_error_of_its_file(tmp_path):
    # pytest's junit report names such a module in ``name`` with an empty class name (torchcodec without FFmpeg)
    (tmp_path / "tests" / "datasets").mkdir(parents=True)
    (tmp_path / "tests" / "datasets" / "test_cache.py").write_text("")
    (tmp_path / "tests" / "datasets" / "test_ok.py").write_text("")
    report = tmp_path / "report.xml"
    report.write_text('<testsuites><testsuite>'
                      '<testcase classname="" name="tests.datasets.test_cache"><error message="collection failure"/>'
                      '</testcase><testcase classname="tests.datasets.test_ok" name="test_a"/></testsuite></testsuites>')
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import conformance
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert conformance.outcomes(report, tmp_path) == {"tests/datasets/test_cache.py": "error",
                                                      "tests/datasets/test_ok.py::test_a": "passed"}


@pytest.mark.parametrize("mode, ours", [("read", True), ("lerobot", False)])
def test_the_plugin_rebinds_lerobots_names_before_tests_import_them(tmp_path, mode, ours):
    """``--drop-in=read``: a test module importing LeRobot's LeRobotDataset and ReplayBuffer gets the drop-ins
    (``create`` still LeRobot's recorder), as do LeRobot's own tools; ``--drop-in=lerobot`` leaves LeRobot's."""
    pytest.importorskip("torch", reason="the drop-ins need torch")
    pytest.importorskip("lerobot", reason="the plugin rebinds LeRobot's names: lerobot is not installed")
    (tmp_path / "test_names.py").write_text(textwrap.dedent(f"""
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
        from lerobot.datasets import dataset_tools, aggregate
        from lerobot.rl.buffer import ReplayBuffer

        def test_names():
            ours = {ours}
            for cls in (LeRobotDataset, dataset_tools.LeRobotDataset, ReplayBuffer):
                assert any(c.__module__.startswith("lerobot_zarr") for c in cls.__mro__) is ours, cls
            assert any(c.__module__.startswith("lerobot_zarr")
                       for c in aggregate.LeRobotDatasetMetadata.__mro__) is ours
            assert "lerobot_zarr" not in type(LeRobotDataset.create).__module__
    """))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conformance_plugin", f"--drop-in={mode}",
                           "-p", "no:cacheprovider", "test_names.py"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_lerobots_tests_pass_with_the_dropin(tmp_path):
    """A part of LeRobot's suite (delta timestamps, episode filters, slices, reading what it records) passes with
    the drop-in exactly as with LeRobot's class."""
    pytest.importorskip("torch", reason="the drop-ins need torch")
    pytest.importorskip("lerobot", reason="LeRobot's tests need lerobot")
    sources = Path(os.environ.get("LEROBOT_SOURCES", REPO.parent / "lerobot-v0.6.1"))
    if not (sources / "tests" / "conftest.py").is_file():
        pytest.skip(f"LeRobot's sources (its tests) are not at {sources}: set LEROBOT_SOURCES")
    selection = "episode_filter or delta_timestamps_ or dataset_slice_with or add_frame_state or getitem_works_after"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(sources), "--against", "lerobot",
                           "--tests", "tests/datasets/test_datasets.py", "tests/datasets/test_lerobot_dataset.py",
                           "--", "-k", selection], env=_env(), capture_output=True, text=True, timeout=3600,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = {line.split(":")[0].strip(): line for line in proc.stdout.splitlines() if ":" in line}
    assert "0 tests differ" in proc.stdout, proc.stdout[-3000:]
    assert " 0 passed" not in lines["drop-ins (read)"], proc.stdout[-3000:]
