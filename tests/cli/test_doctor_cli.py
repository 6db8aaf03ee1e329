"""``lerobot-zarr doctor`` (text and JSON, a store's kept report, a folder or Hub repo checked afresh, --fail-on)
and ``lerobot-zarr edit --drop-defective`` (its dry run changes nothing; the edit drops what the doctor names, and
the pushed dataset reopens clean)."""

from __future__ import annotations

import json
import warnings

import pytest
from hub_fixtures import running_server, server_env

import lerobot_zarr
from lerobot_zarr.cli import main
from lerobot_zarr.testing.defects import LENGTHS, write_case
from lerobot_zarr.testing.hub_server import HubServer

pytestmark = pytest.mark.filterwarnings("ignore::lerobot_zarr.errors.LeRobotZarrWarning")
TOKEN = "hf_doctor_test_token"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    return code, out, err


@pytest.fixture(scope="module")
def jump(module_tmp):
    """The battery's glitch: episode 3, observation.state channel 1, frame 20."""
    return write_case(module_tmp / "jump", "jump").path


@pytest.fixture(scope="module")
def hub(module_tmp, jump):
    server = HubServer(module_tmp / "storage", tokens={TOKEN: "alice"})
    server.add_repo("lab/jumpy", jump, tags=["v3.0"])
    yield from running_server(server)


@pytest.fixture
def env(monkeypatch, tmp_path, hub):
    yield from server_env(monkeypatch, tmp_path, hub)


def tree(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_doctor_of_a_folder_a_store_and_a_hub_repo(capsys, env, jump, tmp_path):
    code, out, err = run(capsys, "doctor", str(jump))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{jump}: 6 episodes: 1 warning in 1 episodes (jump 1)"
    assert lines[1].startswith("warning jump                episode 3, 'observation.state' channels [1], frames 20: "
                               "channel [1 'joint_1'] sticks out of the rest of the episode by ")
    assert len(lines) == 2
    code, out, _ = run(capsys, "doctor", "lab/jumpy", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["counts"] == {"jump": 1} and doc["total_episodes"] == 6
    assert [(d["kind"], d["episode"], d["feature"], d["channels"], d["frames"]) for d in doc["defects"]] == [
        ("jump", 3, "observation.state", [1], [[20, 21]])]
    assert run(capsys, "doctor", str(jump), "--fail-on", "warning")[0] == 1
    assert run(capsys, "doctor", str(jump), "--fail-on", "error")[0] == 0
    store = tmp_path / "store"
    lerobot_zarr.open_dataset(jump, root=store, progress=False)
    code, out, _ = run(capsys, "doctor", str(store))
    assert code == 0 and out.splitlines()[0] == f"{store}: 6 episodes: 1 warning in 1 episodes (jump 1)"
    code, again, _ = run(capsys, "doctor", str(store), "--recheck")
    assert code == 0 and again.splitlines()[:2] == out.splitlines()[:2]
    code, _, err = run(capsys, "doctor", str(store), "--episodes", "1")
    assert code == 1 and "is a store: --episodes and --no-videos apply to a folder" in err and err.count("\n") == 1


def test_edit_drop_defective_dry_run_then_edit_and_push(capsys, env, hub, jump, tmp_path):
    store = tmp_path / "store"
    lerobot_zarr.open_dataset(jump, root=store, progress=False)
    before = tree(store)
    code, _, err = run(capsys, "edit", str(store), "--drop-defective", "jumps")
    assert code == 1 and "unknown defect kind(s) ['jumps']" in err and tree(store) == before
    code, out, err = run(capsys, "edit", str(store), "--drop-defective", "--dry-run")
    assert code == 0, err
    assert "the doctor found defects in 1 episodes" in out and "episodes:   6 -> 5 (deleted 1: [3]" in out
    assert tree(store) == before
    code, out, err = run(capsys, "edit", str(store), "--drop-defective", "jump", "nan", "--push", "alice/clean",
                         "--token", TOKEN)
    assert code == 0, err
    assert "episodes:   6 -> 5 (deleted 1: [3]" in out and "pushed " in out
    code, out, _ = run(capsys, "doctor", "alice/clean", "--token", TOKEN)
    assert code == 0 and out.splitlines()[0].endswith("5 episodes: no defect found")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        back = lerobot_zarr.open_dataset("alice/clean", token=TOKEN, root=tmp_path / "back", progress=False)
    assert back.meta.total_episodes == 5 and back.meta.episode_length.tolist() == [*LENGTHS[:3], *LENGTHS[4:]]


def test_edit_drop_defective_of_a_folder_plans_from_a_check_then_edits_its_copy(capsys, env, jump, tmp_path):
    root = tmp_path / "mine"
    code, out, err = run(capsys, "edit", str(jump), "--root", str(root), "--drop-defective", "--dry-run")
    assert code == 0, err
    assert "episodes:   6 -> 5 (deleted 1: [3]" in out and not root.exists()
    code, out, err = run(capsys, "edit", str(jump), "--root", str(root), "--drop-defective")
    assert code == 0, err
    assert "episodes:   6 -> 5 (deleted 1: [3]" in out
    with lerobot_zarr.open_dataset(root, progress=False) as ds:
        assert ds.meta.total_episodes == 5 and len(ds.defects) == 0
