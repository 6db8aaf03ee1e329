"""The command line, end to end, on the three real datasets (as folders and served by the test Hub) and on a store
recorded with ``lerobot_zarr.create``: every subcommand and its main flags, clean output (no tracebacks, no raw
warnings), and what each command says checked against the files themselves."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hub_fixtures import REAL_DATASETS, lib_requests, real_dataset, running_server, server_env

import lerobot_zarr
from lerobot_zarr.cli import main
from lerobot_zarr.testing.hub_server import HubServer

TOKEN = "hf_cli_test_token"
G1_CAM = "observation.images.cam_high"
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    return code, out, err


def g1_episodes_with_video() -> list[int]:
    """From the folder itself: episodes whose mp4 is present (v2.1 layout, one file per episode)."""
    folder = real_dataset("G1-policy-train") / "videos" / "chunk-000" / G1_CAM
    return sorted(int(p.stem.split("_")[1]) for p in folder.glob("episode_*.mp4"))


def tree_bytes(folder: Path, top: str) -> int:
    return sum(p.stat().st_size for p in (folder / top).rglob("*") if p.is_file()) if (folder / top).exists() else 0


@pytest.fixture(scope="module")
def hub(module_tmp):
    server = HubServer(module_tmp / "storage", tokens={TOKEN: "alice"})
    for name, tag in REAL_DATASETS.items():
        folder = real_dataset(name)
        server.add_repo(f"real/{name}", folder, tags=[tag])
    yield from running_server(server)


@pytest.fixture
def env(monkeypatch, tmp_path, hub):
    yield from server_env(monkeypatch, tmp_path, hub)


@pytest.fixture
def recorded(tmp_path):
    """A store recorded with lerobot_zarr.create: 3 episodes, a 6-d state/action and a 16x20 camera."""
    rng = np.random.default_rng(0)
    features = {"observation.state": {"dtype": "float32", "shape": [6], "names": [f"j{k}" for k in range(6)]},
                "action": {"dtype": "float32", "shape": [6], "names": None},
                "observation.images.cam": {"dtype": "image", "shape": [16, 20, 3],
                                           "names": ["height", "width", "channels"]}}
    with lerobot_zarr.create(tmp_path / "recorded", fps=10, features=features, robot_type="test_arm") as ds:
        for n in (12, 7, 9):
            ds.add_episode({"observation.state": rng.normal(size=(n, 6)).astype(np.float32),
                            "action": rng.normal(size=(n, 6)).astype(np.float32),
                            "observation.images.cam": rng.integers(0, 255, (n, 16, 20, 3), dtype=np.uint8)},
                           task="wave")
    return tmp_path / "recorded"


# ------------------------------------------------------------------------------------------------ info


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"lerobot_zarr {lerobot_zarr.__version__}"


@pytest.mark.parametrize("name", list(REAL_DATASETS))
def test_info_of_real_folders(capsys, env, name):
    folder = real_dataset(name)
    code, out, err = run(capsys, "info", str(folder))
    assert code == 0 and err == ""
    info = json.loads((folder / "meta" / "info.json").read_text())
    assert f"source:       LeRobot folder {folder}\n" in out
    assert f"frames:       {info['total_frames']}\n" in out and f"episodes:     {info['total_episodes']}\n" in out
    assert "stats (mean" in out
    stats_block = out.split("stats (mean")[1].split("store size:")[0]
    assert not any(f"  {k} " in stats_block for k in BOOKKEEPING), "stats of bookkeeping columns listed"
    code, out, _ = run(capsys, "info", str(folder), "--json")
    d = json.loads(out)
    assert d["total_frames"] == info["total_frames"] and d["is_store"] is False
    cameras = {k: f for k, f in d["features"].items() if f["dtype"] == "video"}
    assert cameras, "the real datasets all declare video cameras"
    for f in cameras.values():
        if name == "G1-policy-train":
            have = g1_episodes_with_video()
            assert f["status"] == "partly unavailable", f
            assert str(have[:4]) in f["why"] and "missing in 96 of 100" in f["why"], f["why"]
        else:  # record-test keeps no video; open_50's one video is not where the template says
            assert f["status"] == "unavailable" and "not found" in f["why"], f
    assert d["estimated_store_bytes"] > 0
    assert set(d["stats_mean"]).isdisjoint(BOOKKEEPING)


@pytest.mark.parametrize("name", list(REAL_DATASETS))
def test_info_of_hub_repos(capsys, env, hub, name):
    folder = real_dataset(name)
    code, out, err = run(capsys, "info", f"real/{name}", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["source"]["kind"] == "hub" and d["source"]["repo_id"] == f"real/{name}"
    assert d["source_line"].startswith(f"Hub repo real/{name} @ ") and "\n" not in d["source_line"]
    assert d["remote_bytes"]["data"] == tree_bytes(folder, "data")
    assert d["remote_bytes"]["videos"] == tree_bytes(folder, "videos")
    statuses = {k: f["status"] for k, f in d["features"].items() if f["dtype"] == "video"}
    want = "partly unavailable" if name == "G1-policy-train" else "unavailable"
    assert set(statuses.values()) == {want}
    data_gets = [r for r in hub.requests("GET") if "/resolve/" in r.path and "/data/" in r.path]
    assert data_gets == [], "info read data files"


def test_info_of_a_recorded_store(capsys, recorded):
    code, out, err = run(capsys, "info", str(recorded))
    assert code == 0 and err == ""
    assert "source:       recorded with lerobot_zarr.create\n" in out
    assert "episodes:     3 (3 in the store)" in out and "frames:       28\n" in out
    assert "observation.images.cam" in out and "UNAVAILABLE" not in out
    d = json.loads(run(capsys, "info", str(recorded), "--json")[1])
    assert d["is_store"] and d["local_bytes"] > 28 * 16 * 20 * 3
    assert d["features"]["observation.images.cam"]["status"] == "stored"


def test_errors_are_one_line(capsys, tmp_path, env):
    code, _, err = run(capsys, "info", str(tmp_path / "nothing-here"))
    assert code == 1 and err.startswith("lerobot-zarr: error: ") and err.count("\n") == 1
    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, "info", str(tmp_path / "empty"))
    assert code == 1 and "neither a LeRobot dataset folder" in err
    code, _, err = run(capsys, "info", str(real_dataset("record-test")), "--revision", "v3.0")
    assert code == 1 and "applies to Hub repositories" in err
    code, _, err = run(capsys, "info", "real/no-such-repo")
    assert code == 1 and "not found" in err
    with pytest.raises(SystemExit):
        main(["convert", "x", "--episodes", "1-"])


# ------------------------------------------------------------------------------------------------ convert


def test_convert_folder_warns_in_one_clean_line(capsys, env, tmp_path):
    """record-test keeps no videos: its cameras are left out, said once, without Python's source-line noise."""
    code, out, err = run(capsys, "convert", str(real_dataset("record-test")), "--root", str(tmp_path / "s"))
    assert code == 0
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("lerobot-zarr: warning: "), err
    assert "UserWarning" not in err and ".py:" not in err
    assert "'observation.images.front' is left out of samples" in err
    assert "episodes:     4 (4 in the store)" in out
    assert "observation.images.front         video    (480, 640, 3)  UNAVAILABLE" in out


def test_download_alias_from_the_hub_takes_the_episodes_asked_for(capsys, env, tmp_path):
    pytest.importorskip("av", reason="the video extra (PyAV) decodes the G1 camera")
    have = g1_episodes_with_video()[:2]
    root = tmp_path / "g1"
    code, out, err = run(capsys, "download", "real/G1-policy-train", "--episodes", ",".join(map(str, have)),
                         "--root", str(root))
    assert code == 0 and err == "", err
    assert f"episodes:     100 ({len(have)} in the store)" in out
    ds = lerobot_zarr.open_dataset(root, progress=False)
    assert ds.episodes.tolist() == have and G1_CAM in ds.array_specs and ds.left_out == {}
    assert ds.episode(have[0])[G1_CAM].shape[1:] == (480, 640, 3)
    d = json.loads(run(capsys, "info", str(root), "--json")[1])
    assert d["features"][G1_CAM]["status"] == "stored"  # the held episodes all have it
    assert d["episodes_in_store"] == len(have)


# ------------------------------------------------------------------------------------------------ view


def test_view_a_recorded_store_and_a_real_video_episode(capsys, env, recorded, tmp_path):
    pytest.importorskip("matplotlib", reason="the viz extra (matplotlib) is not installed")
    code, _, _ = run(capsys, "view", str(recorded), "--episode", "1", "--out", str(tmp_path / "r.png"))
    assert code == 0 and (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    pytest.importorskip("av", reason="the video extra (PyAV) decodes the G1 camera")
    e = g1_episodes_with_video()[0]
    code, _, err = run(capsys, "view", "real/G1-policy-train", "--episode", str(e), "--out", str(tmp_path / "g.png"))
    assert code == 0 and err == "", err
    from PIL import Image

    with Image.open(tmp_path / "g.png") as img:
        # 26-d state and action are split into 3 panels each, plus the camera strip
        assert img.size[1] == 7 * round(2.8 * 80)


# ------------------------------------------------------------------------------------------------ push


def test_push_with_token_private_branch_and_message(capsys, env, hub, recorded, tmp_path):
    code, out, err = run(capsys, "push", str(recorded), "alice/recorded", "--private", "--message", "first recording",
                         "--token", TOKEN)
    assert code == 0, err
    assert "pushed" in out and "commit " in out
    assert hub.commits("alice/recorded")[0]["message"] == "first recording"
    assert hub._get_repo("alice/recorded", "dataset")["private"] is True
    copy = lerobot_zarr.open_dataset("alice/recorded", token=TOKEN, root=tmp_path / "back", progress=False)
    want = lerobot_zarr.open_dataset(recorded, progress=False)
    for key in ("observation.state", "action", "observation.images.cam", "index"):
        assert np.array_equal(copy.get_batch(np.arange(len(copy)))[key], want.get_batch(np.arange(len(want)))[key])
    code, out, _ = run(capsys, "push", str(recorded), "alice/recorded", "--token", TOKEN)
    assert code == 0 and "no change" in out
    # --branch: a commit on that branch only
    from huggingface_hub import HfApi

    HfApi(token=TOKEN).create_branch("alice/recorded", branch="dev", repo_type="dataset")
    with lerobot_zarr.open_dataset(recorded, mode="r+") as w:
        w.set_task(0, "wave twice")
    code, out, err = run(capsys, "push", str(recorded), "alice/recorded", "--branch", "dev", "--token", TOKEN)
    assert code == 0 and "alice/recorded@dev: commit " in out, err
    refs = hub.refs("alice/recorded")
    assert refs["branches"]["dev"] != refs["branches"]["main"]
    code, _, err = run(capsys, "push", str(recorded), "alice/other")  # no token
    assert code == 1 and err.startswith("lerobot-zarr: error: ")


def test_push_of_a_partial_store_needs_episodes(capsys, env, hub, tmp_path):
    """A store holding 3 of open_50's episodes is not pushed as if it were the dataset: `push` refuses and names
    `--episodes`; with it the episodes are published as a new dataset, renumbered from 0, with the same values."""
    src = real_dataset("open_50")
    code, _, err = run(capsys, "convert", str(src), "--episodes", "2,5,7", "--root", str(tmp_path / "part"))
    assert code == 0, err
    code, out, err = run(capsys, "push", str(tmp_path / "part"), "alice/part", "--token", TOKEN)
    assert code == 1 and "--episodes" in err and "lacking [0, 1, 3" in err
    code, out, err = run(capsys, "push", str(tmp_path / "part"), "alice/part", "--episodes", "2,5", "--token", TOKEN)
    assert code == 0 and "commit " in out, err
    assert "warning: " in err and "exporting 2 of the store's 50 episodes ([2, 5]), renumbered 0..1" in err
    back = lerobot_zarr.open_dataset("alice/part", token=TOKEN, root=tmp_path / "back", progress=False)
    whole = lerobot_zarr.open_dataset(tmp_path / "part", episodes=[2, 5], progress=False)
    assert back.meta.total_episodes == 2 and len(back) == len(whole)
    a, b = back.get_batch(np.arange(len(back))), whole.get_batch(np.arange(len(whole)))
    assert a["episode_index"].tolist() == [0] * int(whole.meta.episode_length[2]) + [1] * int(
        whole.meta.episode_length[5])
    assert a["index"].tolist() == list(range(len(back)))
    for key in ("state", "actions", "frame_index", "timestamp"):
        assert np.array_equal(a[key], b[key]), key


def test_every_argument_has_help():
    from lerobot_zarr.cli import build_parser

    def walk(parser):
        for action in parser._actions:
            if action.choices and isinstance(action.choices, dict):
                for sub in action.choices.values():
                    yield from walk(sub)
            elif action.dest not in ("help", "version"):
                yield parser.prog, action

    missing = [f"{prog} {a.dest}" for prog, a in walk(build_parser()) if not a.help]
    assert not missing, missing


def test_module_entry_point(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "lerobot_zarr", "--version"], check=False, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert result.returncode == 0 and result.stdout.startswith("lerobot_zarr ")


def test_convert_and_view_open_50_and_push_record_test(capsys, env, tmp_path):
    """open_50: 34-d vectors (3 panels each in the figure); record-test's store pushed: its missing cameras are
    left out of the export, said in one clean warning line."""
    pytest.importorskip("matplotlib", reason="the viz extra (matplotlib) is not installed")
    code, out, err = run(capsys, "convert", str(real_dataset("open_50")), "--episodes", "0-2", "--root",
                         str(tmp_path / "o50"), "--json")
    assert code == 0
    d = json.loads(out)
    assert d["episodes_in_store"] == 3 and d["features"]["image"]["status"] == "unavailable"
    assert lerobot_zarr.open_dataset(tmp_path / "o50", progress=False).episodes.tolist() == [0, 1, 2]
    code, _, _ = run(capsys, "view", str(tmp_path / "o50"), "--episode", "2", "--out", str(tmp_path / "o.png"))
    from PIL import Image

    with Image.open(tmp_path / "o.png") as img:
        assert img.size[1] == 6 * round(2.8 * 80)  # state and actions, 34 dims each: 3 panels of 11-12 lines
    code, _, _ = run(capsys, "convert", str(real_dataset("record-test")), "--root", str(tmp_path / "rt"))
    assert code == 0
    code, out, err = run(capsys, "push", str(tmp_path / "rt"), "alice/record-test", "--token", TOKEN)
    assert code == 0 and "commit " in out
    warned = [line for line in err.splitlines() if "warn" in line.lower()]
    assert warned and all(line.startswith("lerobot-zarr: warning: ") for line in warned), err
    assert "UserWarning" not in err and ".py:" not in err
    back = lerobot_zarr.open_dataset("alice/record-test", token=TOKEN, root=tmp_path / "back", progress=False)
    assert len(back) == 1492 and set(back.array_specs) >= {"action", "observation.state"}


# ------------------------------------------------------------------------------------------------ edit


def g1_column(episode: int, key: str) -> np.ndarray:
    """One column of one G1 episode, read from the folder's own parquet file (v2.1: a file per episode)."""
    import pyarrow.parquet as pq

    path = real_dataset("G1-policy-train") / "data" / "chunk-000" / f"episode_{episode:06d}.parquet"
    return np.array(pq.read_table(path).column(key).to_pylist(), dtype=np.float32)


def tree_snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of a (small) folder with its bytes and mtime: what "nothing changed" compares."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_edit_cleans_g1_then_pushes_and_the_repo_reopens_exact(capsys, env, hub, tmp_path, g1_store):
    """G1-policy-train keeps its camera's mp4 for 4 of its 100 episodes: `edit --keep-episodes` of those makes a
    store whose camera is complete, `--push` publishes it (private, with a message), and the repo reopens with every
    non-camera value bit for bit (the source's parquet values, renumbered), and the camera within AV1's loss. The
    store edited is a copy of the session's G1 store (camera at 24x32; a folder's writable copy is
    test_curation's)."""
    have = g1_episodes_with_video()
    assert have == [1, 2, 4, 5]
    root = tmp_path / "g1-clean"
    shutil.copytree(g1_store, root)
    code, out, err = run(capsys, "edit", str(root), "--keep-episodes", *map(str, have), "--push", "alice/g1-clean",
                         "--token", TOKEN, "--private", "--message", "G1: the episodes with a camera")
    assert code == 0, err
    ours = [line for line in err.splitlines() if line.startswith("lerobot-zarr:")]  # (and huggingface_hub's bars)
    assert not ours, err  # no "left out of samples" warning: an edit samples nothing (its summary says it all)
    lengths = [len(g1_column(e, "action")) for e in have]
    assert f"edited {root} (LeRobot folder {real_dataset('G1-policy-train')})\n" in out
    assert "  episodes:   100 -> 4 (deleted 96: [0, 3, 6, 7, 8, 9, 10, 11]...; kept [1, 2, 4, 5], renumbered from " \
           "0)\n" in out, out
    assert f"  frames:     35965 -> {sum(lengths)}\n" in out
    assert "  features:   none dropped\n" in out
    assert (f"  camera {G1_CAM}: missing in 96 of 100 episodes [0, 3, 6, 7, 8, 9, 10, 11]... -> complete (4 "
            f"episodes)\n") in out, out
    assert f"pushed {root} to alice/g1-clean: commit " in out
    assert hub.commits("alice/g1-clean")[0]["message"] == "G1: the episodes with a camera"
    assert hub._get_repo("alice/g1-clean", "dataset")["private"] is True

    edited = lerobot_zarr.open_dataset(root, progress=False)
    assert edited.meta.total_episodes == 4 and edited.meta.unavailable == {} and edited.left_out == {}
    back = lerobot_zarr.open_dataset("alice/g1-clean", token=TOKEN, root=tmp_path / "back", progress=False)
    assert back.meta.total_episodes == 4 and back.meta.unavailable == {} and back.left_out == {}
    assert back.meta.episode_length.tolist() == lengths
    keys = [k for k in edited.array_specs if k != G1_CAM]
    assert sorted(keys) == sorted(k for k in back.array_specs if k != G1_CAM)
    want = {k: np.concatenate([np.asarray(edited.episode(e, features=keys)[k]) for e in range(4)]) for k in keys}
    got = {k: np.concatenate([np.asarray(back.episode(e, features=keys)[k]) for e in range(4)]) for k in keys}
    for key in keys:
        assert got[key].dtype == want[key].dtype and got[key].tobytes() == want[key].tobytes(), key
    for key in ("observation.state", "action"):
        source = np.concatenate([g1_column(e, key) for e in have])
        assert got[key].reshape(source.shape).tobytes() == source.tobytes(), key
    assert got["episode_index"].reshape(-1).tolist() == np.repeat(np.arange(4), lengths).tolist()
    assert got["index"].reshape(-1).tolist() == list(range(sum(lengths)))
    for e in range(4):  # the camera went out as AV1 (lossy): close to the frames decoded from the source
        a = np.asarray(back.episode(e)[G1_CAM][::6]).astype(np.int16)
        b = np.asarray(edited.episode(e)[G1_CAM][::6]).astype(np.int16)
        assert a.shape == b.shape and np.abs(a - b).mean() < 6, f"episode {e}: {np.abs(a - b).mean()}"


def test_edit_a_hub_repo_drops_features_in_a_store_of_its_own(capsys, env, hub, tmp_path):
    """record-test from the test Hub: its two cameras (no videos kept) are dropped in a writable copy under
    --root; the copy holds every other value bit for bit, and the cached store of the repo is left as it was."""
    cams = ["observation.images.front", "observation.images.top"]
    root = tmp_path / "rt"
    code, out, err = run(capsys, "edit", "real/record-test", "--root", str(root), "--drop-features", *cams,
                         "--token", TOKEN)
    assert code == 0, err
    assert "  episodes:   4 -> 4 (none deleted)\n" in out and "  frames:     1492 -> 1492\n" in out
    assert f"  features:   dropped {cams}\n" in out
    for cam in cams:
        assert f"  camera {cam}: " in out and out.split(f"  camera {cam}: ")[1].split("\n")[0].endswith("-> dropped")
    edited = lerobot_zarr.open_dataset(root, progress=False)
    assert not set(cams) & set(edited.meta.features) and edited.left_out == {}
    assert edited.meta.source["kind"] == "edited" and edited.meta.source["from"]["repo_id"] == "real/record-test"
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match="left out"):  # the cache's copy: cameras still there
        shared = lerobot_zarr.open_dataset("real/record-test", progress=False)
    assert set(cams) <= set(shared.meta.features) and shared.root != root
    idx = np.arange(len(shared))
    a, b = edited.get_batch(idx), shared.get_batch(idx)
    assert sorted(a) == sorted(b)
    for key in a:
        if key != "task":
            assert np.asarray(a[key]).tobytes() == np.asarray(b[key]).tobytes(), key
    # the same edit again: the store already lacks them, said as an error naming the feature
    code, _, err = run(capsys, "edit", "real/record-test", "--root", str(root), "--drop-features", cams[0])
    assert code == 1 and f"no feature '{cams[0]}' to drop" in err and err.count("\n") == 1


def test_edit_a_recorded_store_in_place_and_push_to_a_branch(capsys, env, hub, recorded, tmp_path):
    before = lerobot_zarr.open_dataset(recorded, progress=False)
    rows = {e: {k: np.asarray(v).copy() for k, v in before.episode(e).items()} for e in range(3)}
    code, out, err = run(capsys, "edit", str(recorded), "--delete-episodes", "1", "--drop-features",
                         "observation.images.cam", "--push", "alice/rec-edit", "--token", TOKEN)
    assert code == 0 and "lerobot-zarr:" not in err, err  # (huggingface_hub's upload bars may be there)
    assert "  episodes:   3 -> 2 (deleted 1: [1]; kept [0, 2], renumbered from 0)\n" in out
    assert "  frames:     28 -> 21\n" in out and "  features:   dropped ['observation.images.cam']\n" in out
    assert "  camera observation.images.cam: complete (3 episodes) -> dropped\n" in out
    assert f"pushed {recorded} to alice/rec-edit: commit " in out
    assert not (recorded / "observation.images.cam").exists()
    back = lerobot_zarr.open_dataset("alice/rec-edit", token=TOKEN, root=tmp_path / "back", progress=False)
    assert back.meta.episode_length.tolist() == [12, 9] and "observation.images.cam" not in back.meta.features
    for new, old in ((0, 0), (1, 2)):
        got = back.episode(new)
        for key in ("observation.state", "action", "frame_index", "timestamp"):
            assert np.asarray(got[key]).tobytes() == rows[old][key].tobytes(), (new, key)
        assert np.asarray(got["episode_index"]).reshape(-1).tolist() == [new] * len(rows[old]["action"])
    # a second edit pushed to a branch: only that branch moves
    from huggingface_hub import HfApi

    HfApi(token=TOKEN).create_branch("alice/rec-edit", branch="dev", repo_type="dataset")
    main_before = hub.refs("alice/rec-edit")["branches"]["main"]
    code, out, err = run(capsys, "edit", str(recorded), "--keep-episodes", "1", "--push", "alice/rec-edit",
                         "--branch", "dev", "--token", TOKEN)
    assert code == 0, err
    assert "  episodes:   2 -> 1 (deleted 1: [0]; kept [1], renumbered from 0)\n" in out
    assert f"pushed {recorded} to alice/rec-edit@dev: commit " in out
    refs = hub.refs("alice/rec-edit")
    assert refs["branches"]["main"] == main_before != refs["branches"]["dev"]
    dev = lerobot_zarr.open_dataset("alice/rec-edit", revision="dev", token=TOKEN, root=tmp_path / "dev",
                                    progress=False)
    assert dev.meta.episode_length.tolist() == [9]
    assert np.asarray(dev.episode(0)["action"]).tobytes() == rows[2]["action"].tobytes()


def test_edit_dry_run_changes_nothing(capsys, env, hub, recorded, tmp_path):
    snapshot = tree_snapshot(recorded)
    hub.reset_stats()
    code, out, err = run(capsys, "edit", str(recorded), "--delete-episodes", "0", "--drop-features",
                         "observation.images.cam", "--push", "alice/never", "--token", TOKEN, "--dry-run")
    assert code == 0 and err == "", err
    assert out.startswith(f"dry run: edit {recorded} (recorded with lerobot_zarr.create)\n")
    assert "  episodes:   3 -> 2 (deleted 1: [0]; kept [1, 2], renumbered from 0)\n" in out
    assert "  frames:     28 -> 16\n" in out and "  features:   dropped ['observation.images.cam']\n" in out
    assert "  then push to alice/never (token and write access checked)\n" in out
    assert out.endswith("dry run: nothing was changed\n")
    assert tree_snapshot(recorded) == snapshot, "a dry run changed the store"
    # the push's token and remote were checked, reading only: no repo made, nothing written on the Hub
    assert {r.method for r in lib_requests(hub)} <= {"GET", "HEAD"}, [(r.method, r.path) for r in lib_requests(hub)]
    with pytest.raises(ValueError, match="no dataset repo"):  # the dry run made no repo
        hub.refs("alice/never")
    # a Hub repo with a new --root: metadata only, no store made, no data or video read
    root = tmp_path / "g1"
    code, out, err = run(capsys, "edit", "real/G1-policy-train", "--root", str(root), "--keep-episodes", "1-2,4",
                         "5", "--dry-run")
    assert code == 0 and err == "", err
    assert f"  {root} is made a writable copy of real/G1-policy-train with all its 100 episodes first\n" in out
    assert "  episodes:   100 -> 4 (deleted 96: [0, 3, 6, 7, 8, 9, 10, 11]...; kept [1, 2, 4, 5]" in out
    assert f"  camera {G1_CAM}: missing in 96 of 100 episodes [0, 3, 6, 7, 8, 9, 10, 11]... -> complete (4 " \
           f"episodes)\n" in out, out
    assert not root.exists()
    reads = [r.path for r in lib_requests(hub, "GET") if "/resolve/" in r.path and ("/data/" in r.path
                                                                                   or "/videos/" in r.path)]
    assert reads == [], reads
    assert not list(env.zarr_home.rglob("zarr.json")), "a dry run made a store"


def test_edit_bad_arguments_are_clear_errors_and_change_nothing(capsys, env, recorded, tmp_path):
    snapshot = tree_snapshot(recorded)
    for argv, message in [
        (["--delete-episodes", "1", "7"], f"{recorded}: episode 7 does not exist (3 episodes: 0 to 2); nothing"),
        (["--keep-episodes", "0-3"], f"{recorded}: episode 3 does not exist (3 episodes: 0 to 2)"),
        (["--delete-episodes", "0-2"], "would delete all 3 episodes"),
        (["--drop-features", "action", "nope"], "no feature 'nope' to drop"),
        (["--drop-features", "episode_index"], "['episode_index'] are LeRobot's own columns"),
        ([], "nothing to do"),
        (["--root", str(tmp_path / "x"), "--delete-episodes", "0"], "is a store: it is edited in place"),
        (["--delete-episodes", "1", "--push", ""], "'' is not a Hub dataset repo id"),  # not "no push": refused
        (["--push", ""], "'' is not a Hub dataset repo id"),
    ]:
        code, out, err = run(capsys, "edit", str(recorded), *argv)
        assert code == 1 and out == "" and err.startswith("lerobot-zarr: error: ") and err.count("\n") == 1, err
        assert message in err, (argv, err)
    assert tree_snapshot(recorded) == snapshot
    # a folder: the index is checked on its metadata, before anything is copied
    g1 = real_dataset("G1-policy-train")
    code, _, err = run(capsys, "edit", str(g1), "--root", str(tmp_path / "g1"), "--keep-episodes", "1", "100")
    assert code == 1 and "episode 100 does not exist (100 episodes: 0 to 99)" in err, err
    assert not (tmp_path / "g1").exists()
    code, _, err = run(capsys, "edit", str(g1), "--delete-episodes", "0")
    assert code == 1 and "pass --root DIR" in err
    for bad in (["--delete-episodes", "1-"], ["--delete-episodes", "0", "--keep-episodes", "1"]):
        with pytest.raises(SystemExit) as exc:
            main(["edit", str(recorded), *bad])
        assert exc.value.code == 2
    capsys.readouterr()


def test_store_size_is_the_disk_it_takes_and_json_says_to_store(capsys, env, tmp_path):
    root = tmp_path / "o50"
    code, _, _ = run(capsys, "convert", str(real_dataset("open_50")), "--episodes", "0,3", "--root", str(root))
    assert code == 0
    d = json.loads(run(capsys, "info", str(root), "--json")[1])
    allocated = sum(p.lstat().st_blocks * 512 for p in root.rglob("*") if p.is_file())
    apparent = sum(p.lstat().st_size for p in root.rglob("*") if p.is_file())
    assert d["local_bytes"] == allocated, "the size on disk is what the store takes"
    assert apparent < 4 << 20, "the camera whose videos are missing has no (sparse) pack files"
    d = json.loads(run(capsys, "info", str(real_dataset("open_50")), "--json")[1])
    assert d["features"]["state"]["status"] == "to store" and "estimated_store_bytes" in d
    assert d["estimated_store_bytes"] > 0


def test_reversed_episode_range_is_a_usage_error(capsys, env, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(["convert", str(real_dataset("record-test")), "--episodes", "3-1", "--root", str(tmp_path / "s")])
    assert info.value.code == 2 and "'3-1': expected episode indices like 0,3,5-9" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_output_into_a_closed_pipe_ends_quietly(tmp_path, env):
    import subprocess
    import sys

    MAIN = Path(__file__).resolve().parents[2]
    proc = subprocess.run(f"{sys.executable} -m lerobot_zarr info {real_dataset('open_50')} | true; "
                          f"echo ${{PIPESTATUS[0]}}", shell=True, executable="/bin/bash", capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(MAIN)))
    assert proc.stdout == "0\n" and proc.stderr == "", proc.stderr  # `true` reads nothing: the pipe is closed


def test_edit_dry_run_of_a_partial_store_says_what_it_cannot_know_yet(capsys, env, tmp_path):
    root = tmp_path / "o50"
    assert run(capsys, "convert", str(real_dataset("open_50")), "--episodes", "0,3,5-9", "--root", str(root))[0] == 0
    code, out, _ = run(capsys, "edit", str(root), "--delete-episodes", "3", "5-6", "--dry-run")
    assert code == 0
    line = next(x for x in out.splitlines() if x.strip().startswith("camera image:"))
    was, now = line.split(" -> ")
    assert "of 7 episodes held" in was and "43 episodes not fetched yet" in was
    # after deleting 3, 5 and 6 the held episodes 0, 7, 8, 9 are numbered 0, 4, 5, 6
    assert "missing in 7 of 7 episodes held [0, 3, 5, 6, 7, 8, 9]; 43 episodes not fetched yet" in was
    assert now.strip().startswith("missing in 4 of 4 episodes held [0, 4, 5, 6]; 43 episodes not fetched yet")
