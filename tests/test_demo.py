"""``lerobot-zarr demo``: the main job end to end on the embedded Hub, small, and leaving no setting changed."""

from __future__ import annotations

import os

import huggingface_hub.constants as hf_constants
import pytest

from lerobot_zarr.cli import main


def test_demo_runs_every_step_and_restores_the_hub_settings(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "user_home"))
    endpoint, offline = hf_constants.ENDPOINT, hf_constants.HF_HUB_OFFLINE
    monkeypatch.chdir(tmp_path)  # a work folder ./demo, named like the demo's Hub org: the repo id still is one
    assert main(["demo", "--dir", "demo", "--episodes", "8"]) == 0
    out = capsys.readouterr().out
    for step in range(1, 9):
        assert f"\n{step}. " in "\n" + out, f"step {step} missing:\n{out}"
    assert "http://127.0.0.1:" in out
    assert "of the repo's" in out and "fewer bytes" in out and "x\n" in out  # ratios printed
    assert "equal to the edited store" in out
    assert hf_constants.ENDPOINT == endpoint and hf_constants.HF_HUB_OFFLINE == offline
    assert os.environ["LEROBOT_ZARR_HOME"] == str(tmp_path / "user_home")
    assert not (tmp_path / "user_home").exists(), "the demo wrote into the user's cache"
    assert (tmp_path / "demo" / "store" / "zarr.json").is_file()


def test_demo_refuses_a_non_empty_folder(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("keep me")
    with pytest.raises(SystemExit, match="not empty"):
        main(["demo", "--dir", str(tmp_path / "x")])
    assert (tmp_path / "x" / "f").read_text() == "keep me"
