"""Without PyAV (what installing lerobot_zarr without its ``video`` extra gives), a video camera is left out of
samples WITH a warning and a reason in ``ds.left_out``, absent from the drop-in's ``camera_keys``; the store never
records the missing package, so a later open with PyAV decodes the camera into the same store (and stores made by
earlier versions, which recorded it, heal). Writers, which commit every feature, refuse with the extra to install.

PyAV's import is blocked in a subprocess (a meta-path finder that refuses ``av``), on the real G1-policy-train
(episodes 1, 2, 4, 5 have their mp4; the camera is stored resized to 24x32 to keep the test small)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hub_fixtures import real_dataset

import lerobot_zarr as lz
from lerobot_zarr.store import commit, read_state

REPO = Path(__file__).resolve().parents[2]
CAM = "observation.images.cam_high"
SMALL = {CAM: (24, 32)}
BLOCK_AV = textwrap.dedent("""
    import sys
    class _NoAV:
        def find_spec(self, name, path=None, target=None):
            if name == "av" or name.startswith("av."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
    sys.meta_path.insert(0, _NoAV())
""")


def without_pyav(code: str, tmp_path: Path, *args: str) -> dict:
    """Run ``code`` (which prints one JSON document last) in a Python whose ``import av`` fails."""
    env = dict(os.environ, PYTHONPATH=str(REPO), LEROBOT_ZARR_HOME=str(tmp_path / "home"),
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", BLOCK_AV + textwrap.dedent(code), *args], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


OPEN_WITHOUT_PYAV = """
    import json, sys, warnings
    import lerobot_zarr as lz
    from lerobot_zarr.store.state import read_state
    src, root, episodes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ds = lz.open_dataset(src, root=root, episodes=episodes, resize={%r: (24, 32)}, progress=False)
        again = lz.open_dataset(src, root=root, episodes=episodes, resize={%r: (24, 32)}, progress=False)
    state = read_state(ds.root)
    try:  # publishing without PyAV would lose the camera: refused
        ds.to_lerobot(root + "-export")
        export = None
    except ImportError as exc:
        export = [type(exc).__name__, str(exc)]
    print(json.dumps({
        "export": export,
        "warnings": [str(w.message) for w in seen if issubclass(w.category, lz.LeRobotZarrWarning)],
        "left_out": ds.left_out, "item": sorted(ds[0]), "episode": sorted(ds.episode(episodes[0])),
        "batch": sorted(ds.get_batch([0, 1])), "frames": len(ds), "again": sorted(again[0]),
        "not_materialized": state.not_materialized, "arrays": sorted(state.arrays),
        "camera_done": state.materialized_mask(%r).tolist(), "unavailable": sorted(state.unavailable_of(%r)),
    }))
""" % (CAM, CAM, CAM, CAM)


def test_g1_without_pyav_leaves_the_camera_out_with_a_reason_and_a_later_open_decodes_it(tmp_path):
    src = real_dataset("G1-policy-train")
    pytest.importorskip("av")
    store = tmp_path / "store"
    got = without_pyav(OPEN_WITHOUT_PYAV, tmp_path, str(src), str(store), "[1, 2]")
    # one warning naming the camera and the extra (the second open of the same store in the process says nothing)
    assert len(got["warnings"]) == 1, got["warnings"]
    assert CAM in got["warnings"][0] and "PyAV" in got["warnings"][0] and "[video]" in got["warnings"][0]
    assert "PyAV" in got["left_out"][CAM] and "pip install" in got["left_out"][CAM]
    assert CAM not in got["item"] and CAM not in got["episode"] and CAM not in got["batch"]
    assert CAM not in got["again"] and "observation.state" in got["item"]
    assert got["export"][0] == "MissingExtraError" and "[video]" in got["export"][1], got["export"]
    assert not (tmp_path / "store-export").exists()
    # the store holds the camera's array, not decoded yet; nothing about the environment is written into it
    assert CAM in got["arrays"] and got["not_materialized"] == {}
    assert not any(got["camera_done"]) and got["unavailable"] == []
    assert "PyAV" not in (store / "zarr.json").read_text()

    # the same open where PyAV is installed decodes the camera into the same store: equal to a store made with PyAV
    ds = lz.open_dataset(src, root=store, episodes=[1, 2], resize=SMALL, progress=False)
    assert ds.left_out == {} and ds[0][CAM].shape == (24, 32, 3)
    ref = lz.open_dataset(src, root=tmp_path / "ref", episodes=[1, 2], resize=SMALL, progress=False)
    idx = np.arange(len(ref))
    a, b = ds.get_batch(idx), ref.get_batch(idx)
    assert sorted(a) == sorted(b) and len(ds) == got["frames"]
    for key in a:
        if key != "task":
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert a[CAM].any(), "decoded frames are not all black"


def test_a_store_that_recorded_the_missing_package_heals_when_pyav_is_there(tmp_path):
    """Earlier versions wrote 'decoding videos needs PyAV' into the store (no camera array): an open with PyAV adds
    the camera and decodes it, with no ``cache rm``."""
    src = real_dataset("G1-policy-train")
    pytest.importorskip("av")
    store = tmp_path / "old"
    ref = lz.open_dataset(src, root=tmp_path / "ref", episodes=[1], resize=SMALL, progress=False)
    lz.open_dataset(src, root=store, episodes=[1], resize=SMALL, progress=False).close()
    state = read_state(store)
    commit(replace(state, arrays={k: v for k, v in state.arrays.items() if k != CAM},
                   materialized={k: v for k, v in state.materialized.items() if k != CAM},
                   not_materialized={CAM: "decoding videos needs PyAV: pip install 'lerobot_zarr[video]'"}),
           previous=state)
    shutil.rmtree(store / CAM)
    assert CAM not in lz.open_dataset(store, progress=False)[0]  # what the old store gave
    healed = lz.open_dataset(src, root=store, episodes=[1], resize=SMALL, progress=False)
    assert healed.left_out == {} and read_state(store).not_materialized == {}
    np.testing.assert_array_equal(healed.get_batch(np.arange(len(ref)))[CAM], ref.get_batch(np.arange(len(ref)))[CAM])


SYNTH_CAM = "observation.images.front"


def test_pyav_installed_later_decodes_even_when_the_decode_runs_before_the_data_file_shapes_are_read(tmp_path,
                                                                                                    monkeypatch):
    """docs/cameras.md's path: a store made without PyAV, then opened where PyAV is installed. The decode threads
    and the thread reading the data files' shapes race; the order that failed (a decode before the shapes are read)
    is forced here: reading the shapes waits until a decode has run. A video's frame shape is info.json's, known
    before either starts."""
    pytest.importorskip("av")
    from lerobot_zarr.lerobot import source as source_module
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    src = write_sample_dataset(tmp_path / "src", n_episodes=3, lengths=(6, 9), state_dim=2, action_dim=2,
                               image_shape=(12, 16, 3), video_keys=(SYNTH_CAM,), write_videos=True, seed=8)
    store = tmp_path / "store"
    got = without_pyav("""
        import json, sys, warnings
        warnings.simplefilter("ignore")
        import lerobot_zarr as lz
        ds = lz.open_dataset(sys.argv[1], root=sys.argv[2], progress=False)
        print(json.dumps({"left_out": sorted(ds.left_out)}))
    """, tmp_path, str(src), str(store))
    assert got["left_out"] == [SYNTH_CAM]

    decoded = threading.Event()
    real_decode, real_shapes = source_module.decode_into, source_module.LeRobotSource._resolve_frame_shapes

    def decode_into(*args, **kwargs):
        try:
            return real_decode(*args, **kwargs)
        finally:
            decoded.set()

    def shapes_after_a_decode(self):
        assert decoded.wait(60), "no decode started before the data file shapes were read: the race is not forced"
        return real_shapes(self)

    monkeypatch.setattr(source_module, "decode_into", decode_into)
    monkeypatch.setattr(source_module.LeRobotSource, "_resolve_frame_shapes", shapes_after_a_decode)
    ds = lz.open_dataset(src, root=store, progress=False)
    monkeypatch.undo()
    assert decoded.is_set() and ds.left_out == {}
    ref = lz.open_dataset(src, root=tmp_path / "ref", progress=False)
    np.testing.assert_array_equal(ds.get_batch(np.arange(len(ds)))[SYNTH_CAM],
                                  ref.get_batch(np.arange(len(ref)))[SYNTH_CAM])
    # the same at the source: a fresh reader decodes before it reads any data file
    fresh = source_module.LeRobotSource(src)
    frames = []
    fresh.decode_video(0, SYNTH_CAM, np.arange(2) / fresh.fps, frames.append)
    assert len(frames) == 2 and len(frames[0]) == 12 * 16 * 3


def test_writers_without_pyav_refuse_with_the_extra_to_install(tmp_path):
    """A writer commits every feature of every episode: with the camera not decoded it cannot, so it says what to
    install; the store is left as it was."""
    src = real_dataset("G1-policy-train")
    got = without_pyav("""
        import json, sys
        import lerobot_zarr as lz
        try:
            lz.open_dataset(sys.argv[1], root=sys.argv[2], mode="r+", resize={%r: (24, 32)}, progress=False)
        except ImportError as exc:
            print(json.dumps({"error": type(exc).__name__, "text": str(exc),
                              "typed": isinstance(exc, lz.LeRobotZarrError)}))
        else:
            print(json.dumps({"error": None}))
    """ % CAM, tmp_path, str(src), str(tmp_path / "mine"))
    assert got["error"] == "MissingExtraError" and got["typed"], got
    assert "PyAV" in got["text"] and "[video]" in got["text"] and CAM in got["text"] and "\n" not in got["text"]


EDIT_WITHOUT_PYAV = """
    import contextlib, io, json, sys, warnings
    warnings.simplefilter("ignore")
    import lerobot_zarr as lz
    from lerobot_zarr.cli import main
    src, tmp = sys.argv[1], sys.argv[2]
    out = {}

    def edit(*args):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            return [main(["edit", *args, "--delete-episodes", "3"]), err.getvalue()]

    for what, args in [("dry run", ["--dry-run"]), ("edit", [])]:  # a copy of the folder to make first
        out[what] = edit(src, "--root", tmp + "/copy", *args)
    lz.open_dataset(src, root=tmp + "/store", resize={%r: (24, 32)}, progress=False)  # a store made without PyAV
    for what, args in [("store dry run", ["--dry-run"]), ("store edit", [])]:
        out[what] = edit(tmp + "/store", *args)
    try:
        lz.open_dataset(tmp + "/store", mode="r+")
    except ImportError as exc:
        out["writer"] = str(exc)
    print(json.dumps(out))
""" % CAM


def test_edit_without_pyav_is_refused_by_its_dry_run_too_naming_the_episodes_that_have_video(tmp_path):
    """The dry run refuses what the edit refuses (a writer decodes the camera first); both say so before anything
    changes, and name only the episodes that have a video (1, 2, 4, 5 of G1-policy-train), never those without."""
    src = real_dataset("G1-policy-train")
    store = tmp_path / "store"
    got = without_pyav(EDIT_WITHOUT_PYAV, tmp_path, str(src), str(tmp_path))
    for what in ("dry run", "edit", "store dry run", "store edit"):
        code, err = got[what]
        assert code == 1 and err.startswith("lerobot-zarr: error: ") and err.count("\n") == 1, (what, err)
        assert "in episodes [1, 2, 4, 5], which needs PyAV" in err, (what, err)
    assert "episodes [1, 2, 4, 5], which needs PyAV" in got["writer"], got["writer"]
    assert not (tmp_path / "copy").exists(), "the edit was refused before its copy was made"
    unavailable = read_state(store).unavailable_of(CAM)
    assert sorted(unavailable) == [e for e in range(100) if e not in (1, 2, 4, 5)], "no video: unavailable"
    assert all("not found" in why or "no video" in why for why in unavailable.values())


def test_cli_without_pyav_warns_once_and_info_says_what_to_install(tmp_path):
    src = real_dataset("G1-policy-train")
    env = dict(os.environ, PYTHONPATH=str(REPO), LEROBOT_ZARR_HOME=str(tmp_path / "home"),
               HF_HUB_DISABLE_PROGRESS_BARS="1")

    def cli(*args: str) -> subprocess.CompletedProcess:
        code = BLOCK_AV + "from lerobot_zarr.cli import main\nsys.exit(main(sys.argv[1:]))"
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                              timeout=600)

    proc = cli("convert", str(src), "--episodes", "1,2", "--root", str(tmp_path / "s"), "--resize", f"{CAM}=24x32")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lerobot-zarr: warning: ") and "PyAV" in lines[0], proc.stderr
    assert f"{CAM}" in proc.stdout and "PyAV" in proc.stdout  # the summary says why the camera is not there
    info = cli("info", str(src), "--json")
    assert info.returncode == 0, info.stderr
    status = json.loads(info.stdout)["features"][CAM]
    assert status["status"] == "needs PyAV" and "[video]" in status["why"], status


def test_torch_drop_in_without_pyav_lists_only_the_cameras_it_serves(tmp_path):
    """LeRobot's training code builds the policy's inputs from ``meta.camera_keys`` / ``meta.features``: a camera
    left out of the items must not be listed there."""
    pytest.importorskip("torch")
    src = real_dataset("G1-policy-train")
    got = without_pyav("""
        import json, sys, warnings
        warnings.simplefilter("ignore")
        from lerobot_zarr.integrations.torch import LeRobotDataset
        ds = LeRobotDataset("local/g1", root=sys.argv[1], episodes=[1, 2], store=sys.argv[2])
        print(json.dumps({"camera_keys": ds.meta.camera_keys, "video_keys": ds.meta.video_keys,
                          "features": sorted(ds.meta.features), "item": sorted(ds[0]),
                          "left_out": ds.dataset.left_out}))
    """, tmp_path, str(src), str(tmp_path / "store"))
    assert got["camera_keys"] == [] and got["video_keys"] == [], got
    assert CAM not in got["features"] and CAM not in got["item"] and CAM in got["left_out"]
    assert "observation.state" in got["features"]
