"""A newcomer's first hour (issue 19), on the real datasets of ../shared/datasets: selections are honoured by
``ds.episode``, ``edit --push`` checks before it changes anything, errors name their fix, long edits skip the
deleted episodes, missing optional packages name their extra, mistyped paths are paths, camera experiments get
stores of their own, and the command line's small things (``-v`` anywhere, whole paths, machine-readable camera
availability, distinct colours, the Hub server as a command)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import G1_CAM, G1_SMALL
from hub_fixtures import make_env, real_dataset

import lerobot_zarr as lz
from lerobot_zarr import (
    FrameIndexError,
    LeRobotZarrWarning,
    NotMaterializedError,
    SourceNotFoundError,
    UnknownFeatureError,
)
from lerobot_zarr.cli import main
from lerobot_zarr.errors import OPTIONAL_PACKAGES
from lerobot_zarr.store.state import read_state
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

REPO = Path(__file__).resolve().parents[1]
TOKEN = "hf_newcomer"
WITH_VIDEO = [1, 2, 4, 5]  # the G1 episodes whose mp4 the shared copy keeps


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    return code, out, err


def quiet_open(*args, **kwargs) -> lz.LeRobotZarrDataset:
    """open_dataset, its warnings ignored (the shared G1 store warned once, when it was made)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LeRobotZarrWarning)
        return lz.open_dataset(*args, progress=False, **kwargs)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with HubServer(tmp_path / "server", tokens={TOKEN: "me"}) as server:
        make_env(monkeypatch, tmp_path, server.endpoint)
        yield server


# ------------------------------------------------------------------------------------------------ item 2


def test_episode_outside_the_selection_raises_and_a_selection_of_frames_is_what_episode_gives(g1_store):
    ds = quiet_open(g1_store, episodes=WITH_VIDEO)
    with pytest.raises(FrameIndexError, match=r"episode 3 is not in this dataset's selection \(4 episodes: "
                                              r"\[1, 2, 4, 5\]\)"):
        ds.episode(3)  # its video is missing: before, 459 frames of zeros came back
    frames = ds.episode(4)[G1_CAM]
    assert frames.shape == (int(ds.meta.episode_length[4]), *G1_SMALL, 3) and np.asarray(frames).any()
    part = quiet_open(g1_store, episodes={4: slice(10, 20)})
    got = part.episode(4)
    assert len(got["frame_index"]) == 10 and got["frame_index"].tolist() == list(range(10, 20))
    np.testing.assert_array_equal(got[G1_CAM], np.asarray(frames)[10:20])
    np.testing.assert_array_equal(got["action"], ds.episode(4)["action"][10:20])
    with pytest.raises(UnknownFeatureError, match="acton"):
        ds.episode(4, features=["acton"])
    whole = quiet_open(g1_store)  # all episodes: the camera is left out, never zeros
    assert G1_CAM not in whole.episode(3) and G1_CAM in whole.left_out
    with pytest.raises(NotMaterializedError, match="select episodes that have it"):
        whole.episode(4, features=[G1_CAM])


# ------------------------------------------------------------------------------------------------ item 5


def test_a_camera_in_delta_timestamps_on_a_real_dataset_names_the_episodes_that_have_it(g1_store):
    with pytest.raises(NotMaterializedError) as info:
        lz.open_dataset(g1_store, delta_timestamps={G1_CAM: [-1 / 30, 0.0]}, progress=False)
    text = str(info.value)
    assert "select episodes that have it: episodes=[1, 2, 4, 5]" in text and "delta_timestamps" in text, text
    ds = quiet_open(g1_store, episodes=WITH_VIDEO, delta_timestamps={G1_CAM: [-1 / 30, 0.0]})  # the fix works
    assert ds[0][G1_CAM].shape == (2, *G1_SMALL, 3) and ds[0][f"{G1_CAM}_is_pad"].tolist() == [True, False]


# ------------------------------------------------------------------------------------------------ item 6


def test_edit_keeping_four_g1_episodes_computes_stats_of_those_only(g1_store, tmp_path, capsys, monkeypatch):
    import lerobot_zarr.writing.stats_cache as stats_cache
    import lerobot_zarr.writing.values as values

    store = tmp_path / "g1"
    shutil.copytree(g1_store, store)
    cameras, bars = [], []
    real_stats, real_bar = values.episode_stats, stats_cache.progress_bar

    def counting(frames, kind, **kwargs):
        if kind == "video":
            cameras.append(len(frames))
        return real_stats(frames, kind, **kwargs)

    def recording(total, desc, enabled, **kwargs):
        bars.append((total, desc))
        return real_bar(total, desc, enabled, **kwargs)

    monkeypatch.setattr(values, "episode_stats", counting)  # the writer's stats of stored values
    monkeypatch.setattr(stats_cache, "progress_bar", recording)
    code, out, err = run(capsys, "edit", str(store), "--keep-episodes", "1,2,4,5")
    assert code == 0, err
    lengths = read_state(g1_store).table.length
    # the camera's stats of the four kept episodes, whole; nothing for the 96 deleted ones
    assert sorted(cameras) == sorted(int(lengths[e]) for e in WITH_VIDEO), cameras
    assert bars == [(int(lengths[WITH_VIDEO].sum()), f"episode stats of {store.name}")], bars
    ds = lz.open_dataset(store, progress=False)
    assert ds.meta.total_episodes == 4 and ds.left_out == {}
    stats = ds.meta.stats["action"]
    want = np.concatenate([lz.open_dataset(g1_store, episodes=[e], progress=False).episode(e)["action"]
                           for e in WITH_VIDEO])
    np.testing.assert_allclose(stats["mean"], want.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(stats["max"], want.max(axis=0))


# ------------------------------------------------------------------------------------------------ item 3


@pytest.fixture
def recorded(tmp_path) -> Path:
    features = {"observation.state": {"dtype": "float32", "shape": [3], "names": None},
                "action": {"dtype": "float32", "shape": [3], "names": None}}
    rng = np.random.default_rng(0)
    with lz.create(tmp_path / "rec", fps=10, features=features, durable=False) as w:
        for n in (5, 6, 7, 8):
            w.add_episode({k: rng.normal(size=(n, 3)).astype(np.float32) for k in features}, task="t")
    return tmp_path / "rec"


@pytest.mark.parametrize("token", [None, "hf_wrong"])
def test_edit_push_with_a_bad_or_missing_token_changes_nothing(hub, recorded, capsys, monkeypatch, token):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    before = snapshot(recorded)
    args = ["edit", str(recorded), "--delete-episodes", "3", "--push", "me/rec"] + (["--token", token] if token
                                                                                     else [])
    code, out, err = run(capsys, *args)
    assert code == 1 and "token" in err and "remote is unchanged" in err, err
    assert snapshot(recorded) == before, "the edit was applied although the push could not happen"
    code, out, err = run(capsys, *args[:-2] if token else args, "--token", TOKEN)  # the same command, fixed
    assert code == 0, err
    assert lz.open_dataset(recorded, progress=False).meta.total_episodes == 3
    assert lz.open_dataset("me/rec", token=TOKEN, progress=False).meta.total_episodes == 3


def test_edit_push_to_a_repo_holding_another_dataset_is_refused_before_the_edit(hub, recorded, tmp_path, capsys):
    other = write_sample_dataset(tmp_path / "other", n_episodes=2)
    hub.add_repo("me/taken", other, tags=["v3.0"])
    before = snapshot(recorded)
    code, out, err = run(capsys, "edit", str(recorded), "--delete-episodes", "0", "--push", "me/taken",
                         "--token", TOKEN)
    assert code == 1 and "holds another dataset" in err and "features differ" in err, err
    assert len(err) < 400, err  # one readable line, not the features' JSON
    assert snapshot(recorded) == before


def test_a_push_failing_after_the_edit_says_the_edit_is_applied_and_how_to_push(hub, recorded, capsys):
    hub.inject_fault(path_contains="/commit/", kind="500", count=1000, method="POST")
    code, out, err = run(capsys, "edit", str(recorded), "--delete-episodes", "0", "--push", "me/later",
                         "--token", TOKEN)
    assert code == 1 and out.startswith(f"edited {recorded}"), (out, err)
    command = f"lerobot-zarr push {recorded} me/later"
    assert f"the edit of {recorded} is applied" in err and f"`{command}`" in err, err
    assert lz.open_dataset(recorded, progress=False).meta.total_episodes == 3  # applied, once
    hub.clear_faults()
    code, out, err = run(capsys, *command.split()[1:], "--token", TOKEN)  # what the message says to run
    assert code == 0 and "pushed" in out, err
    assert lz.open_dataset("me/later", token=TOKEN, progress=False).meta.total_episodes == 3


# ------------------------------------------------------------------------------------------------ item 7

BLOCK = textwrap.dedent("""
    import sys
    BLOCKED = set(sys.argv.pop(1).split(","))
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
    sys.meta_path.insert(0, _Block())
""")


def blocked(modules: str, code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_DISABLE_PROGRESS_BARS="1")
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(code), modules, *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_a_script_next_to_the_checkout_imports_the_package(tmp_path):
    """Run from the folder that holds the checkout (a clone named lerobot_zarr: here a link of that name), Python
    would take the checkout for an empty namespace package unless the install puts it on sys.path (the README's
    and bootstrap's ``editable_mode=compat``). Checked with the interpreter the suite runs under, when it is the
    bootstrapped one."""
    if Path(sys.prefix).resolve() != (REPO / ".venv").resolve():
        pytest.skip("not the checkout's .venv (scripts/bootstrap.sh makes it): its install mode is not ours")
    (tmp_path / "lerobot_zarr").symlink_to(REPO, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", "import lerobot_zarr; print(lerobot_zarr.__file__)"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0 and Path(proc.stdout.strip()) == REPO / "lerobot_zarr" / "__init__.py", (
        proc.stdout, proc.stderr[-500:])


def test_the_extras_named_in_errors_are_those_of_pyproject():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, (_, requirement, extra) in OPTIONAL_PACKAGES.items():
        assert requirement in extras[extra], (module, requirement, extras[extra])


@pytest.mark.parametrize("modules, argv, extra", [
    ("matplotlib", ["view", "{rt}", "--episode", "0", "--out", "{tmp}/e.png"], "viz"),
    ("rerun", ["view", "{rt}", "--episode", "0", "--out", "{tmp}/e.png", "--rrd", "{tmp}/e.rrd"], "viz"),
    ("distributed", ["convert", "{rt}", "--root", "{tmp}/s", "--scheduler", "tcp://127.0.0.1:1"], "xarray"),
    ("simplejpeg", ["convert", "{gen}", "--root", "{tmp}/j", "--storage", "observation.images.cam=jpeg"], "jpeg"),
])
def test_cli_without_an_optional_package_says_which_extra_in_one_line(tmp_path, modules, argv, extra):
    rt = real_dataset("record-test")
    gen = write_sample_dataset(tmp_path / "gen", n_episodes=2, image_keys=("observation.images.cam",))
    args = [a.format(rt=rt, tmp=tmp_path, gen=gen) for a in argv]
    proc = blocked(modules, "from lerobot_zarr.cli import main\nsys.exit(main(sys.argv[1:]))", *args)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("lerobot-zarr: error: ")]
    assert proc.returncode == 1 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"lerobot_zarr's [{extra}] extra" in lines[0] and "pip install '" in lines[0], lines[0]
    assert not (tmp_path / "s").exists() and not (tmp_path / "j" / "zarr.json").exists()  # nothing made


def test_python_api_without_dask_or_torch_names_the_extra(tmp_path):
    rt = real_dataset("record-test")
    proc = blocked("dask,torch", """
        import json, warnings
        warnings.simplefilter("ignore")
        import lerobot_zarr as lz
        out = {}
        ds = lz.open_dataset(sys.argv[1], root=sys.argv[2], progress=False)
        for what, call in (("to_xarray", ds.to_xarray), ("torch", lambda: __import__("lerobot_zarr.integrations.torch")),
                           ("rl", lambda: __import__("lerobot_zarr.integrations.rl"))):
            try:
                call()
            except ImportError as exc:
                out[what] = [type(exc).__name__, str(exc)]
        print(json.dumps(out))
    """, str(rt), str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["to_xarray"][0] == "MissingExtraError" and "[xarray] extra" in got["to_xarray"][1], got
    assert got["torch"][0] == "MissingExtraError" and "[torch] extra" in got["torch"][1], got
    assert got["rl"][0] == "MissingExtraError" and "[torch] extra" in got["rl"][1], got


# ------------------------------------------------------------------------------------------------ item 8


def test_a_mistyped_local_path_is_no_such_folder_not_a_hub_lookup(tmp_path, monkeypatch, capsys):
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "G1-policy-train").symlink_to(real_dataset("G1-policy-train"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: a Hub lookup would fail slowly
    for call in (lambda: lz.open_dataset("datasets/G1-policy-trian"), lambda: lz.inspect("datasets/G1-policy-trian"),
                 lambda: lz.stream("datasets/G1-policy-trian")):
        with pytest.raises(SourceNotFoundError) as info:
            call()
        assert "no such folder; did you mean datasets/G1-policy-train?" in str(info.value), info.value
    code, out, err = run(capsys, "info", "datasets/G1-policy-trian")
    assert code == 1 and err.startswith("lerobot-zarr: error: datasets/G1-policy-trian: no such folder"), err
    assert lz.inspect("datasets/G1-policy-train").total_episodes == 100  # spelled right: the folder


def test_hf_prefix_reaches_the_hub_even_where_a_local_folder_has_the_org_name(hub, tmp_path, monkeypatch):
    hub.add_repo("lab/record-test", real_dataset("record-test"), tags=["v3.0"])
    (tmp_path / "lab" / "record-tests").mkdir(parents=True)  # one typo away: the name is taken for a path
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SourceNotFoundError, match=r"did you mean lab/record-tests\?.*hf://datasets/lab/record-test"):
        lz.inspect("lab/record-test")
    assert lz.inspect("hf://datasets/lab/record-test").total_episodes == 4
    (tmp_path / "lab" / "record-tests").rename(tmp_path / "lab" / "notes")  # a folder named like the org, nothing
    assert lz.inspect("lab/record-test").total_episodes == 4                # near: the repo id (as the demo's)


# ------------------------------------------------------------------------------------------------ item 9


@pytest.mark.parametrize("script, done", [("train_loop.py", "200 batches of 256"),
                                          ("analyze_with_xarray.py", "recomputed vs the dataset's stats")])
def test_examples_on_the_three_real_datasets_warn_once_each(g1_store, tmp_path, script, done):
    """record-test and open_50 as folders (transcoded into the example's cache), G1-policy-train as the shared
    store made from its folder (its camera small); open_50 names its features ``state`` / ``actions``."""
    if script == "analyze_with_xarray.py":
        pytest.importorskip("dask")
    for source in (real_dataset("record-test"), real_dataset("open_50"), g1_store):
        env = dict(os.environ, PYTHONPATH=str(REPO), LEROBOT_ZARR_HOME=str(tmp_path / "home"))
        proc = subprocess.run([sys.executable, str(REPO / "examples" / script), str(source)],
                              capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stderr.count("LeRobotZarrWarning") <= 1, proc.stderr
        assert done in proc.stdout, proc.stdout[-2000:]


# ------------------------------------------------------------------------------------------------ item 10


def test_camera_choices_without_root_get_a_store_of_their_own(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "home"))
    cam = "observation.images.cam"
    src = write_sample_dataset(tmp_path / "src", n_episodes=3, image_keys=(cam,), image_shape=(32, 40, 3))
    code, out, err = run(capsys, "convert", str(src), "--storage", f"{cam}=jpeg", "--resize", f"{cam}=16x20",
                         "--json")
    assert code == 0, err
    variant = Path(json.loads(out)["location"])
    plain = lz.open_dataset(src, progress=False)  # what every other open of the source reads
    assert plain.root != variant and plain.array_specs[cam].frame_shape == (32, 40, 3)
    assert plain.array_specs[cam].storage == "raw"
    again = lz.open_dataset(src, storage={cam: "jpeg:90"}, resize={cam: (16, 20)}, progress=False)
    assert again.root == variant  # the same choices, spelled otherwise, find the same store
    listed = {Path(s.path): s.variant for s in lz.cache_info()}
    assert listed[plain.root] == "" and "jpeg:90, resized to 16x20" in listed[variant], listed
    code, out, err = run(capsys, "cache", "ls")
    assert str(src) in out and "[observation.images.cam=jpeg:90, resized to 16x20]" in out, out


# ------------------------------------------------------------------------------------------------ item 12


def test_cache_ls_shows_whole_paths_and_v_goes_anywhere(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "home"))
    deep = tmp_path / ("a-rather-long-folder-name-" * 3) / "record-test"
    shutil.copytree(real_dataset("record-test"), deep, ignore=shutil.ignore_patterns("videos"))
    with pytest.warns(LeRobotZarrWarning):
        lz.open_dataset(deep, progress=False)
    code, out, err = run(capsys, "cache", "ls", "-v")
    assert code == 0 and str(deep) in out, out
    code, out, err = run(capsys, "info", str(deep), "-v")
    assert code == 0 and "episodes:     4" in out


def test_help_text_has_no_rst_markup(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "org/name" in out


def test_info_json_lists_the_episodes_with_and_without_each_camera(capsys):
    code, out, err = run(capsys, "info", str(real_dataset("G1-policy-train")), "--json")
    cam = json.loads(out)["features"][G1_CAM]
    assert cam["episodes_with"] == WITH_VIDEO
    assert cam["episodes_without"] == [e for e in range(100) if e not in WITH_VIDEO]


def test_editing_a_feature_that_does_not_exist_names_the_editable_ones(recorded):
    with lz.open_dataset(recorded, mode="r+") as w, w.edit(0) as ep:
        with pytest.raises(UnknownFeatureError) as info:
            ep["acton"]
    assert isinstance(info.value, KeyError) and "'acton'" in str(info.value)
    assert "['observation.state', 'action']" in str(info.value), info.value


def test_view_panels_have_distinct_colours_and_y_labels(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "home"))
    from lerobot_zarr.integrations.view import view_episode

    with pytest.warns(LeRobotZarrWarning):
        view_episode(real_dataset("open_50"), 0, out=tmp_path / "e.png")
    panels = [ax for ax in figures[0].axes if ax.get_lines()]
    assert len(panels) >= 3  # 34-d state and actions: panels of at most 12 lines
    for ax in panels:
        colours = [tuple(line.get_color()) for line in ax.get_lines()]
        assert len(set(colours)) == len(colours), (ax.get_title(), len(colours))
        assert ax.get_ylabel(), ax.get_title()
    assert max(len(ax.get_lines()) for ax in panels) >= 11


def test_push_from_a_non_terminal_writes_no_terminal_escapes(hub, recorded, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_ENDPOINT=hub.endpoint, HF_HUB_DISABLE_XET="1", HF_TOKEN=TOKEN,
               HF_HOME=str(tmp_path / "hf"))
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    proc = subprocess.run([sys.executable, "-m", "lerobot_zarr", "push", str(recorded), "me/logged"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stderr and "\r" not in proc.stderr, repr(proc.stderr[:500])


def test_the_hub_server_runs_as_a_command(tmp_path):
    """It serves a folder until stopped; stopped with SIGTERM (`kill`) as with Ctrl-C, it removes its storage."""
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.Popen([sys.executable, "-m", "lerobot_zarr.testing.hub_server", "--repo",
                             f"real/rt={real_dataset('record-test')}"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        endpoint = re.search(r"HF_ENDPOINT=(\S+)", "".join(lines)).group(1)
        check = subprocess.run([sys.executable, "-m", "lerobot_zarr", "info", "real/rt", "--json"],
                               capture_output=True, text=True, timeout=120,
                               env=dict(env, HF_ENDPOINT=endpoint, LEROBOT_ZARR_HOME=str(tmp_path / "home"),
                                        HF_HOME=str(tmp_path / "hf")))
        assert check.returncode == 0, check.stderr
        assert json.loads(check.stdout)["total_episodes"] == 4
        assert [p.name.startswith("lerobot_zarr-hub-") for p in (tmp_path / "tmp").iterdir()] == [True]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped" in out and not list((tmp_path / "tmp").iterdir()), out



# ------------------------------------------------------------------------------------------------ item 11


def _readme_block(title: str, language: str) -> str:
    text = (REPO / "README.md").read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return section.split(f"```{language}\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def pusht(hub):
    """The README's example repo, served by the test Hub: a generated dataset with a camera, named lerobot/pusht."""
    src = write_sample_dataset(Path(hub.storage_dir).parent / "pusht", n_episodes=12, lengths=(60, 80),
                               image_keys=("observation.image",), image_shape=(24, 32, 3))
    hub.add_repo("lerobot/pusht", src, tags=["v3.0"])
    return hub


def test_readme_python_quick_start_runs(pusht):
    code = _readme_block("Python quick start", "python")  # the first block (the LeRobotDataset swap needs torch)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (the README's own example)
    assert namespace["item"]["action"].shape[0] == 16 and namespace["batch"]["action"].shape[:2] == (3, 16)
    assert namespace["ds"].episodes.tolist() == [0, 1, 2] and "observation.image" in namespace["item"]


def test_readme_command_line_quick_start_runs(pusht, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_ENDPOINT=pusht.endpoint, HF_HUB_DISABLE_XET="1",
               HF_HOME=str(tmp_path / "hf"), LEROBOT_ZARR_HOME=str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    for line in _readme_block("Command line quick start", "bash").splitlines():
        argv = line.split("#", 1)[0].split()
        if not argv:
            continue
        assert argv[0] == "lerobot-zarr", line
        proc = subprocess.run([sys.executable, "-m", "lerobot_zarr", *argv[1:]], capture_output=True, text=True,
                              env=env, cwd=work, timeout=300)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (line, proc.stderr[-2000:])
    assert (work / "episode_3.png").read_bytes()[:4] == b"\x89PNG" and not (work / "mine").exists()


def test_readme_and_docs_links_resolve_and_the_cli_reference_covers_every_option():
    from lerobot_zarr.cli import build_parser

    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if not target.startswith("http"):
                assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"
    reference = (REPO / "docs" / "cli.md").read_text()
    parser = build_parser()

    def walk(p: "argparse.ArgumentParser", path: str) -> None:  # noqa: F821
        for action in p._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help", "-v", "--verbose", "--version"):
                    assert option in reference, f"docs/cli.md does not mention {path} {option}"
            choices = getattr(action, "choices", None)  # sub-commands: a dict; an option's values: a list
            for name, sub in (choices.items() if isinstance(choices, dict) else ()):
                if hasattr(sub, "_actions"):
                    assert f"`{name}`" in reference or f"{name} " in reference, f"docs/cli.md lacks {path} {name}"
                    walk(sub, f"{path} {name}")

    walk(parser, "lerobot-zarr")
    assert len((REPO / "README.md").read_text().splitlines()) <= 150
    here = str(REPO.parent) + os.sep  # this machine's paths: docs use repo-relative ones
    assert here not in (REPO / "README.md").read_text() + "".join(p.read_text() for p in (REPO / "docs").glob("*"))
