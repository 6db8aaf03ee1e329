"""The scripts in examples/ run as the README shows them (each in its own process, on generated data)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lerobot_zarr as lz

MAIN = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script,args", [("online_buffer.py", ["--root", "{tmp}/buffer"]), ("train_loop.py", []),
                                         ("analyze_with_xarray.py", []), ("train_mixture.py", [])])
def test_example_runs(tmp_path, script, args):
    env = dict(os.environ, PYTHONPATH=str(MAIN), LEROBOT_ZARR_HOME=str(tmp_path / "cache"), TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, str(MAIN / "examples" / script), *(a.format(tmp=tmp_path) for a in args)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and proc.stdout.strip()
    if script == "analyze_with_xarray.py":  # its generated dataset is temporary: nothing left behind
        assert not list(tmp_path.glob("lerobot_zarr-analysis-*")), list(tmp_path.iterdir())


def test_a_reader_opened_on_an_empty_store_with_windows_sees_later_episodes(tmp_path):
    w = lz.create(tmp_path / "s", fps=10, features={"action": {"dtype": "float32", "shape": [2]}}, durable=False,
                  min_free_bytes=0)
    deltas = {"action": [k / 10 for k in range(8)]}
    reader = lz.LeRobotZarrDataset(tmp_path / "s", delta_timestamps=deltas)  # before the first episode
    assert len(reader) == 0 and reader.get_batch(np.zeros(0, np.int64))["action"].shape == (0, 8, 2)
    w.add_episode({"action": np.arange(6, dtype=np.float32).reshape(3, 2)}, task="t")
    reader.refresh()
    item = reader[2]
    assert item["action"].shape == (8, 2) and item["action_is_pad"].tolist() == [False] + [True] * 7
    w.close()
