"""open_dataset("org/name") and inspect() against the test Hub server, driven through the real huggingface_hub client.

One HubServer per module serves generated datasets (v3.0 with several episodes per file and one row group per
episode, v2.1) and the real datasets of ../shared/datasets. Every test gets fresh caches (huggingface_hub's and
lerobot_zarr's), so what a test measures at the server is what its own opens transferred.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import G1_CAM, G1_SMALL
from hub_fixtures import (
    DATASETS_DIR,
    REAL_DATASETS,
    assert_same_frames,
    column_chunk_ranges,
    files_under,
    footer_size,
    lib_requests,
    no_hf_data_copies,
    overlaps,
    parse_range,
    real_dataset,
    resolve_prefix,
    row_groups,
    server_env,
)
from huggingface_hub import snapshot_download

import lerobot_zarr
import lerobot_zarr.hub.http as hub_http
import lerobot_zarr.lerobot.range_files as range_files
from lerobot_zarr import HubError, NotMaterializedError, inspect, open_dataset
from lerobot_zarr.lerobot import source_meta
from lerobot_zarr.lerobot.source import LeRobotSource
from lerobot_zarr.lerobot.table_footer import footer_table
from lerobot_zarr.store.state import has_commit_point, read_state
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

DATA0 = "data/chunk-000/file-000.parquet"
FOOTER_READ = 64 * 1024  # what pyarrow reads from the end of a file to find its footer


@dataclass
class Repo:
    repo_id: str
    folder: Path
    sha: str
    n_episodes: int
    data_files: list[str] = field(default_factory=list)  # data file of each episode


@dataclass
class Hub:
    server: HubServer
    repos: dict[str, Repo]
    extra: dict


def _add(server: HubServer, repos: dict, key: str, repo_id: str, folder: Path, tag: str) -> None:
    sha = server.add_repo(repo_id, folder, tags=[tag])
    src = LeRobotSource(folder)
    repos[key] = Repo(repo_id, folder, sha, len(src.episodes), list(src.episodes.data_file))


@pytest.fixture(scope="module")
def hub(module_tmp):
    base = module_tmp
    gen = base / "generated"
    server = HubServer(base / "storage")
    repos: dict[str, Repo] = {}
    # v3.0: 8 episodes, 3 per data file (3 files), one row group per episode, an image feature and a 2-d feature
    _add(server, repos, "v3", "org/v3", write_sample_dataset(
        gen / "v3", n_episodes=8, episodes_per_file=3, lengths=(20, 40), image_keys=("observation.images.top",),
        image_shape=(8, 10, 3), extra_nd=True, seed=3), "v3.0")  # fmt: skip
    _add(server, repos, "v21", "org/v21", write_sample_dataset(
        gen / "v21", version="v2.1", n_episodes=5, lengths=(20, 40), seed=4), "v2.1")  # fmt: skip
    # big rows (2 x 128 float32 per frame): 8 episodes of ~400 kB row groups in one 3.4 MB data file
    _add(server, repos, "big", "org/big", write_sample_dataset(
        gen / "big", n_episodes=8, lengths=(250, 300), state_dim=128, action_dim=128, seed=5), "v3.0")  # fmt: skip
    # many short episodes: the per-episode stats/* columns dominate meta/episodes
    _add(server, repos, "many", "org/many", write_sample_dataset(
        gen / "many", n_episodes=300, lengths=(2, 4), state_dim=32, action_dim=32, seed=6), "v3.0")  # fmt: skip
    # revisions: tag v3.0 on a first commit, then a later commit on main with other data
    rev_a = write_sample_dataset(gen / "rev_a", n_episodes=4, lengths=(10, 20), seed=7)
    rev_b = write_sample_dataset(gen / "rev_b", n_episodes=5, lengths=(10, 20), seed=8)
    sha_a = server.add_repo("org/revs", rev_a, tags=["v3.0"])
    sha_b = server.add_repo("org/revs", rev_b, commit_message="later commit on main")
    for name, tag in REAL_DATASETS.items():
        folder = DATASETS_DIR / name
        if (folder / "meta" / "info.json").is_file():
            _add(server, repos, name, f"real/{name}", folder, tag)
    with server:
        yield Hub(server, repos, {"rev_a": rev_a, "rev_b": rev_b, "sha_a": sha_a, "sha_b": sha_b})
    assert server.errors == [], server.errors[0]


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path, hub):
    yield from server_env(monkeypatch, tmp_path, hub.server)


def _repo(hub: Hub, key: str) -> Repo:
    if key in REAL_DATASETS:
        real_dataset(key)  # skips when absent
    return hub.repos[key]


def _local(repo: Repo, tmp_path: Path, episodes=None, name: str = "local", resize=None):
    return open_dataset(repo.folder, root=tmp_path / name, episodes=episodes, progress=False, resize=resize)


def _small(key: str) -> dict | None:
    """G1's camera stored small (decoded from the same mp4 bytes, then resized alike on both sides): the
    comparisons stay bit-exact at a hundredth of the disk."""
    return {G1_CAM: G1_SMALL} if key == "G1-policy-train" else None


def _data_bytes(server, repo: Repo, rel: str) -> int:
    return server.bytes_sent(resolve_prefix(repo.repo_id, repo.sha) + rel)


ALL = ["v3", "v21", "record-test", "open_50", "G1-policy-train"]


# ------------------------------------------------------------------------------------------------ bit-exact


@pytest.mark.parametrize("key", ALL)
def test_whole_hub_open_is_bit_exact(hub, env, tmp_path, key):
    repo = _repo(hub, key)
    ds = open_dataset(repo.repo_id, progress=False, resize=_small(key))
    local = _local(repo, tmp_path, resize=_small(key))
    assert_same_frames(ds, local, f"{repo.repo_id} (whole)")
    assert ds.meta.info == local.meta.info
    assert json.dumps(ds.meta.stats, sort_keys=True) == json.dumps(local.meta.stats, sort_keys=True)
    assert ds.meta.not_materialized == local.meta.not_materialized
    # cameras whose mp4 is missing (real datasets): the same episodes unavailable from the Hub as locally
    assert {k: sorted(v) for k, v in ds.meta.unavailable.items()} == \
        {k: sorted(v) for k, v in local.meta.unavailable.items()}
    assert ds.left_out.keys() == local.left_out.keys()
    assert ds.meta.source["kind"] == "hub" and ds.meta.source["commit"] == repo.sha
    tag = REAL_DATASETS.get(key, "v2.1" if key == "v21" else "v3.0")
    assert hub.server.refs(repo.repo_id)["tags"] == {tag: repo.sha}  # LeRobot's choice: the version tag
    assert Path(ds.root).is_relative_to(env.zarr_home)


@pytest.mark.parametrize("key", ALL)
def test_partial_hub_open_is_bit_exact(hub, env, tmp_path, key):
    repo = _repo(hub, key)
    k, m = 1, repo.n_episodes - 1
    ds = open_dataset(repo.repo_id, episodes=[k, m], progress=False, resize=_small(key))
    local = _local(repo, tmp_path, episodes=[k, m], resize=_small(key))
    assert list(ds.episodes) == [k, m]
    assert_same_frames(ds, local, f"{repo.repo_id} episodes [{k}, {m}]")
    assert np.flatnonzero(ds.meta.materialized_episodes).tolist() == [k, m]
    # only the data files of those episodes were read
    data_paths = {r.path.split(f"/{repo.sha}/", 1)[1] for r in lib_requests(hub.server, "GET", "/resolve/")
                  if "/data/" in r.path}  # fmt: skip
    wanted = {repo.data_files[k], repo.data_files[m], repo.data_files[0]}  # file of episode 0: schema footer
    assert data_paths <= wanted, sorted(data_paths - wanted)


@pytest.mark.parametrize("key", ["record-test", "open_50"])
def test_first_open_through_the_footer_of_a_real_episode_table_is_bit_exact(hub, env, tmp_path, key, monkeypatch,
                                                                             caplog):
    """A first open of one episode read footer first (as tables over 16 MiB are; these real ones are smaller): the
    store's episode table (every start, length, first task) and the episode's frames equal a local open's, whether
    the footer's statistics give the lengths or the table is read whole after it, the reason logged."""
    monkeypatch.setattr(source_meta, "_FOOTER_FIRST_MIN", 0)
    footers = []
    monkeypatch.setattr(source_meta, "footer_table", lambda *a: footers.append(a) or footer_table(*a))
    repo = _repo(hub, key)
    k = repo.n_episodes - 1
    with caplog.at_level(logging.INFO, logger="lerobot_zarr"):
        ds = open_dataset(repo.repo_id, episodes=[k], progress=False)
    local = _local(repo, tmp_path, episodes=[k])
    assert_same_frames(ds, local, f"{repo.repo_id} episode {k}, first open")
    assert len(footers) == 1  # the store was made from what the footer path gave
    got, want = read_state(ds.root).table, read_state(local.root).table
    for name in ("start", "length", "task_index"):
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name
    read = sum(r.bytes_sent for r in lib_requests(hub.server, "GET", "/meta/episodes/"))
    whole = sum(path.stat().st_size for path in (repo.folder / "meta" / "episodes").rglob("*.parquet"))
    assert read <= whole  # each byte of the table at most once
    # less than the table, or the reason it was read whole; a table under 64 KiB comes whole with its footer's read
    assert read < whole or whole <= 64 << 10 or "the episode table is read whole" in caplog.text


def test_frame_range_subset_matches_local(hub, tmp_path):
    repo = hub.repos["v3"]
    sel = {4: slice(5, 15), 6: (0, 3)}
    ds = open_dataset(repo.repo_id, episodes=sel, progress=False)
    local = _local(repo, tmp_path, episodes=sel)
    assert len(ds) == 13
    assert_same_frames(ds, local, "frame ranges")


# ------------------------------------------------------------------------------------------------ revisions


def test_default_revision_is_the_v3_tag_not_a_later_main(hub, tmp_path):
    sha_a, sha_b = hub.extra["sha_a"], hub.extra["sha_b"]
    assert sha_a != sha_b and hub.server.refs("org/revs")["branches"]["main"] == sha_b
    local_a = open_dataset(hub.extra["rev_a"], root=tmp_path / "a", progress=False)
    local_b = open_dataset(hub.extra["rev_b"], root=tmp_path / "b", progress=False)

    by_sha = open_dataset("org/revs", revision=sha_a, progress=False)  # a 40-hex commit sha
    assert by_sha.meta.source["commit"] == sha_a
    assert_same_frames(by_sha, local_a, "revision=<sha of v3.0>")

    default = open_dataset("org/revs", progress=False)
    assert default.meta.source["commit"] == sha_a
    assert_same_frames(default, local_a, "default revision")
    assert read_state(Path(default.root)).source["commit"] == sha_a  # recorded in the store

    main = open_dataset("org/revs", revision="main", progress=False)
    assert main.meta.source["commit"] == sha_b
    assert_same_frames(main, local_b, "revision=main")
    assert Path(main.root).resolve() != Path(default.root).resolve()  # two commits never share a store
    assert main.meta.total_episodes == 5 and default.meta.total_episodes == 4

    tagged = open_dataset("org/revs", revision="v3.0", progress=False)
    assert tagged.meta.source["commit"] == sha_a


def test_same_commit_reached_by_another_name_extends_the_same_store(hub, tmp_path):
    """Tag v3.0, branch main and the commit sha all name one commit of org/v3: episodes opened under one name must
    be reusable, and more episodes addable, under another (one store per commit)."""
    repo = hub.repos["v3"]
    first = open_dataset(repo.repo_id, episodes=[0], progress=False)  # default: tag v3.0
    for revision, episodes in (("main", [0, 1]), (repo.sha, [0, 1, 2])):
        ds = open_dataset(repo.repo_id, revision=revision, episodes=episodes, progress=False)
        assert ds.meta.source["commit"] == repo.sha
        assert Path(ds.root).resolve() == Path(first.root).resolve()
        assert_same_frames(ds, _local(repo, tmp_path, episodes=episodes, name=f"local-{len(episodes)}"), revision)


# ------------------------------------------------------------------------------------------------ bytes


def test_one_episode_of_a_multi_episode_file_transfers_its_row_group_only(hub, env, tmp_path, capsys):
    repo = hub.repos["big"]
    server = hub.server
    path = repo.folder / DATA0
    size = path.stat().st_size
    groups = row_groups(path)
    assert len(groups) == repo.n_episodes == 8  # one row group per episode
    ep = 3
    target = groups[ep]
    footer = max(footer_size(path), min(size, FOOTER_READ))
    meta_files = sum(p.stat().st_size for p in files_under(repo.folder / "meta"))

    ds = open_dataset(repo.repo_id, episodes=[ep], progress=False)
    assert target.num_rows == int(ds.meta.episode_length[ep])
    assert_same_frames(ds, _local(repo, tmp_path, episodes=[ep]), "one episode")

    data_gets = lib_requests(server, "GET", resolve_prefix(repo.repo_id, repo.sha) + "data/")
    assert data_gets and all(r.path.endswith(DATA0) for r in data_gets)
    assert all(r.range is not None and r.status == 206 for r in data_gets), [(r.range, r.status) for r in data_gets]
    assert lib_requests(server, "HEAD", "/data/") == []
    data_bytes = _data_bytes(server, repo, DATA0)
    total_bytes = server.bytes_sent(resolve_prefix(repo.repo_id))
    assert data_bytes <= 1.25 * (target.compressed + footer), (data_bytes, target.compressed, footer)
    assert total_bytes <= 1.25 * (target.compressed + footer + meta_files), (total_bytes, meta_files)

    # no request touches another episode's row group, except reads of the file's tail that fetch the footer
    hit = False
    for r in data_gets:
        start, stop = parse_range(r.range, size)
        if stop == size:
            assert stop - start <= max(FOOTER_READ, footer_size(path)), f"tail read {r.range} is not a footer read"
            continue
        others = [g.index for g in groups if g.index != ep and overlaps((start, stop), (g.start, g.stop))]
        assert others == [], f"request {r.range} reads row groups {others} (episode {ep} is row group {ep})"
        hit |= overlaps((start, stop), (target.start, target.stop))
    assert hit, "no request read the episode's row group"

    # what snapshot_download with LeRobot-style allow_patterns transfers for the same episode: the whole file
    server.reset_stats()
    snap = snapshot_download(repo.repo_id, repo_type="dataset", revision="v3.0", endpoint=server.endpoint,
                             cache_dir=tmp_path / "snapshot_cache", allow_patterns=[DATA0, "meta/*"], token=False)
    assert (Path(snap) / DATA0).read_bytes() == path.read_bytes()
    snap_data = sum(r.bytes_sent for r in server.requests("GET", DATA0))
    snap_total = server.bytes_sent(f"/datasets/{repo.repo_id}/resolve/")
    assert snap_data == size
    with capsys.disabled():
        print(f"\n[bytes] one episode (row group {target.compressed} B) of a {size} B data file: "
              f"lerobot_zarr data file {data_bytes} B, total {total_bytes} B | snapshot_download data file "
              f"{snap_data} B, total {snap_total} B")
    assert data_bytes * 4 < snap_data and total_bytes * 3 < snap_total


def test_inspect_reads_a_small_episode_table_whole_in_one_request(hub, env):
    """A small episode table (here with its stats columns, one row group) costs less as one request than as a
    footer read followed by the columns needed: it comes whole, once, together with the other metadata files."""
    repo = hub.repos["many"]
    rel = "meta/episodes/chunk-000/file-000.parquet"
    size = (repo.folder / rel).stat().st_size
    assert size <= range_files._WHOLE_FILE_MAX
    meta = inspect(repo.repo_id)
    assert meta.total_episodes == 300
    reads = lib_requests(hub.server, "GET", resolve_prefix(repo.repo_id, repo.sha) + rel)
    assert [(r.range, r.bytes_sent) for r in reads] == [(None, size)]


def test_inspect_reads_metadata_only_without_stats_columns(hub, env, capsys, monkeypatch):
    """An episode table too big to read whole: its footer, then the columns needed (never the stats columns)."""
    monkeypatch.setattr(range_files, "_WHOLE_FILE_MAX", 0)
    repo = hub.repos["many"]
    server = hub.server
    local = LeRobotSource(repo.folder)
    meta = inspect(repo.repo_id)

    assert meta.fps == 30 and meta.robot_type == local.info["robot_type"]
    assert meta.features == local.info["features"]
    assert meta.total_episodes == 300 and np.array_equal(meta.episode_length, local.episodes.length)
    assert meta.total_frames == int(local.episodes.length.sum())
    assert meta.tasks == local.tasks
    assert meta.stats == json.loads((repo.folder / "meta" / "stats.json").read_text()) and meta.stats
    hub_bytes = meta.source["remote_bytes"]
    assert hub_bytes["data"] == sum(p.stat().st_size for p in files_under(repo.folder / "data"))
    assert hub_bytes["meta"] == sum(p.stat().st_size for p in files_under(repo.folder / "meta"))
    assert meta.source["commit"] == repo.sha
    assert not meta.materialized_episodes.any()

    paths = [r.path for r in lib_requests(server)]
    assert not [p for p in paths if re.search(r"/resolve/[^/]+/(data|videos)/", p)], paths

    rel = "meta/episodes/chunk-000/file-000.parquet"
    file = repo.folder / rel
    size = file.stat().st_size
    stats_ranges = column_chunk_ranges(file, "stats/")
    stats_bytes = sum(b - a for a, b in stats_ranges)
    assert stats_bytes > 0.6 * size, "dataset too small for the check: stats columns must dominate"
    served = server.bytes_sent(resolve_prefix(repo.repo_id, repo.sha) + rel)
    with capsys.disabled():
        print(f"\n[bytes] inspect: meta/episodes {served} B served of {size} B (stats/* columns {stats_bytes} B); "
              f"all requests {server.bytes_sent()} B")
    assert served <= 0.1 * size, (served, size)
    for r in lib_requests(server, "GET", rel):
        start, stop = parse_range(r.range, size)
        if stop == size and stop - start <= max(FOOTER_READ, footer_size(file)):
            continue  # footer read
        touched = [c for c in stats_ranges if overlaps((start, stop), c)]
        assert touched == [], f"request {r.range} fetched {len(touched)} stats/* column chunk(s)"


def test_more_episodes_later_fetch_only_the_new_row_group(hub, env, tmp_path):
    repo = hub.repos["big"]
    server = hub.server
    path = repo.folder / DATA0
    size = path.stat().st_size
    groups = row_groups(path)
    footer = max(footer_size(path), min(size, FOOTER_READ))

    first = open_dataset(repo.repo_id, episodes=[1], progress=False)
    server.reset_stats()
    second = open_dataset(repo.repo_id, episodes=[1, 2], progress=False)
    assert Path(second.root).resolve() == Path(first.root).resolve()
    assert_same_frames(second, _local(repo, tmp_path, episodes=[1, 2]), "episodes [1, 2]")
    data_bytes = _data_bytes(server, repo, DATA0)
    assert data_bytes <= 1.25 * (groups[2].compressed + footer), (data_bytes, groups[2].compressed)
    for r in lib_requests(server, "GET", DATA0):
        start, stop = parse_range(r.range, size)
        if stop == size:
            continue  # footer read
        assert not overlaps((start, stop), (groups[1].start, groups[1].stop)), f"{r.range} refetched episode 1"

    server.reset_stats()
    again = open_dataset(repo.repo_id, episodes=[1, 2], progress=False)
    assert Path(again.root).resolve() == Path(first.root).resolve()
    reqs = [(r.method, r.path) for r in lib_requests(server)]
    assert reqs == [("GET", f"/api/datasets/{repo.repo_id}/refs")], reqs


def test_one_local_copy_nothing_in_the_huggingface_cache(hub, env, monkeypatch):
    open_dataset(hub.repos["v3"].repo_id, progress=False)
    open_dataset(hub.repos["big"].repo_id, episodes=[0, 5], progress=False)
    open_dataset(hub.repos["v21"].repo_id, episodes=[2], progress=False)
    no_hf_data_copies(env)
    # default store location (no LEROBOT_ZARR_HOME): under HF_HOME, still no source file anywhere there
    monkeypatch.delenv("LEROBOT_ZARR_HOME")
    ds = open_dataset(hub.repos["v3"].repo_id, episodes=[1], progress=False)
    assert Path(ds.root).is_relative_to(env.hf_home)
    assert [p for p in files_under(env.hf_home) if p.suffix in (".parquet", ".mp4", ".jsonl")] == []
    assert files_under(env.hf_cache) == []


# ------------------------------------------------------------------------------------------------ offline


def test_offline_reopen_makes_no_request(hub, env, tmp_path):
    repo = hub.repos["v3"]
    online = open_dataset(repo.repo_id, episodes=[0, 4], progress=False)
    env.offline()
    hub.server.reset_stats()
    ds = open_dataset(repo.repo_id, episodes=[0, 4], progress=False)
    assert Path(ds.root).resolve() == Path(online.root).resolve()
    assert_same_frames(ds, _local(repo, tmp_path, episodes=[0, 4]), "offline reopen")
    by_path = open_dataset(online.root, episodes=[4], progress=False)
    assert len(by_path) == int(ds.meta.episode_length[4])
    assert hub.server.requests() == []


def test_offline_missing_episode_raises_not_materialized(hub, env):
    repo = hub.repos["v3"]
    online = open_dataset(repo.repo_id, episodes=[0], progress=False)
    env.offline()
    hub.server.reset_stats()
    with pytest.raises(NotMaterializedError, match=r"\b5\b"):
        open_dataset(repo.repo_id, episodes=[0, 5], progress=False)
    with pytest.raises(NotMaterializedError, match=r"\b5\b"):
        open_dataset(online.root, episodes=[0, 5], progress=False)
    assert hub.server.requests() == []


def test_offline_never_opened_repo_raises_hub_error(hub, env):
    open_dataset(hub.repos["v3"].repo_id, episodes=[0], progress=False)
    env.offline()
    hub.server.reset_stats()
    with pytest.raises(HubError) as e:
        open_dataset(hub.repos["v21"].repo_id, progress=False)
    assert isinstance(e.value, ConnectionError) and "offline" in str(e.value).lower()
    with pytest.raises(HubError):  # a revision of an opened repo that was never resolved here
        open_dataset(hub.repos["v3"].repo_id, revision="main", episodes=[0], progress=False)
    assert hub.server.requests() == []


def test_offline_inspect_and_info_read_the_store_this_machine_holds(hub, env, capsys):
    """inspect() and `lerobot-zarr info` of a repo opened before: its metadata from the local store, no request;
    a repo never opened here is a HubError saying so."""
    from lerobot_zarr.cli import main

    repo = hub.repos["v3"]
    online = inspect(repo.repo_id)
    open_dataset(repo.repo_id, episodes=[0], progress=False)
    env.offline()
    hub.server.reset_stats()
    meta = inspect(repo.repo_id)
    assert meta.info == online.info and meta.tasks == online.tasks and meta.fps == online.fps
    np.testing.assert_array_equal(meta.episode_length, online.episode_length)
    assert meta.stats.keys() == online.stats.keys()
    assert main(["info", repo.repo_id]) == 0
    out = capsys.readouterr().out
    assert repo.repo_id in out and re.search(rf"episodes:\s+{len(online.episode_length)}\b", out), out
    assert hub.server.requests() == []
    with pytest.raises(HubError, match="never opened on this machine"):
        inspect(hub.repos["v21"].repo_id)


def test_offline_metadata_equals_lerobots_offline_metadata(hub, env, monkeypatch, tmp_path):
    """LeRobot's own metadata class opens offline from what its cache holds; ours from the store: the same
    dataset (fps, features, episodes and their lengths, tasks)."""
    pytest.importorskip("lerobot", reason="lerobot is not installed (LeRobot's metadata offline)")
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata
    except ImportError as exc:
        pytest.skip(f"lerobot is installed but its LeRobotDatasetMetadata does not import: {exc}")
    repo = hub.repos["v3"]
    open_dataset(repo.repo_id, episodes=[0], progress=False)
    env.offline()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.server.reset_stats()
    theirs = LeRobotDatasetMetadata(repo.repo_id, root=repo.folder)
    ours = inspect(repo.repo_id)
    assert ours.fps == theirs.fps and ours.total_episodes == theirs.total_episodes
    assert set(ours.features) == set(theirs.features) and ours.total_frames == theirs.total_frames
    assert list(ours.episode_length) == [int(n) for n in theirs.episodes["length"]]
    assert ours.tasks == list(theirs.tasks.index)
    assert hub.server.requests() == []


def test_drop_in_metadata_reads_a_hub_repo_through_its_source(hub, env, tmp_path, monkeypatch):
    """``LeRobotDatasetMetadata(repo_id)`` without a local copy reads the repo's metadata files from the Hub (the
    revision resolved by the Hub source) and equals the same class on the repo's folder; no data file is read."""
    pytest.importorskip("torch", reason="the drop-in's metadata class needs torch")
    from lerobot_zarr.integrations.lerobot_meta import LeRobotDatasetMetadata

    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "lerobot_home"))
    repo = hub.repos["v3"]
    hub.server.reset_stats()
    online = LeRobotDatasetMetadata(repo.repo_id)
    local = LeRobotDatasetMetadata(repo.repo_id, root=repo.folder)
    assert online.info.to_dict() == local.info.to_dict() and online.total_episodes == local.total_episodes
    assert list(online.tasks.index) == list(local.tasks.index)
    assert hub.server.requests(path_contains="/data/") == []


# ------------------------------------------------------------------------------------------------ faults


@pytest.fixture()
def fast_retries(monkeypatch):
    """Shorter backoff between the library's bounded retries (the number of attempts is unchanged)."""
    monkeypatch.setattr(hub_http, "_BACKOFF_S", 0.01, raising=False)


def _assert_committed_episodes_are_whole(store: Path, local, repo: Repo) -> list[int]:
    """Every episode the store lists as committed holds exactly the source's frames; returns them."""
    if not has_commit_point(store):
        return []
    present = np.flatnonzero(read_state(store).complete_episodes()).tolist()
    ds = open_dataset(store, progress=False)
    assert list(ds.episodes) == present
    for e in present:
        got, want = ds.episode(e), local.episode(e)
        for k in want:
            assert np.asarray(got[k]).tobytes() == np.asarray(want[k]).tobytes(), f"episode {e} {k} is partial"
    return present


def test_permanent_server_error_raises_after_bounded_retries_then_resumes(hub, env, tmp_path, fast_retries):
    repo = hub.repos["v3"]
    server = hub.server
    local = _local(repo, tmp_path)
    first = open_dataset(repo.repo_id, episodes=[0], progress=False)  # a committed episode before the failure
    store = Path(first.root)
    bad_file = "data/chunk-000/file-001.parquet"  # episodes 3, 4, 5
    server.reset_stats()
    server.inject_fault(path_contains=resolve_prefix(repo.repo_id, repo.sha) + bad_file, kind="500", count=1000)
    with pytest.raises(HubError) as e:
        open_dataset(repo.repo_id, progress=False)
    assert isinstance(e.value, ConnectionError)
    assert "file-001" in str(e.value)
    failed = [r for r in lib_requests(server, "GET", bad_file) if r.status == 500]
    assert 2 <= len(failed) <= 10, f"{len(failed)} attempts: retries must happen and be bounded"

    present = _assert_committed_episodes_are_whole(store, local, repo)
    assert 0 in present and not {3, 4, 5} & set(present)

    server.clear_faults()
    ds = open_dataset(repo.repo_id, progress=False)
    assert Path(ds.root).resolve() == store.resolve()
    assert_same_frames(ds, local, "after resuming")


def test_connection_dropped_inside_every_row_group_read_fails_cleanly(hub, env, tmp_path, fast_retries):
    """Footer reads (64 KiB) complete; every row-group read (~400 kB) is cut after 70 kB."""
    repo = hub.repos["big"]
    server = hub.server
    local = _local(repo, tmp_path, episodes=[0, 2, 6])
    store = Path(open_dataset(repo.repo_id, episodes=[0], progress=False).root)
    server.reset_stats()
    server.inject_fault(path_contains=resolve_prefix(repo.repo_id, repo.sha) + DATA0, kind="drop",
                        after_bytes=70_000, count=1000)  # fmt: skip
    with pytest.raises(HubError) as e:
        open_dataset(repo.repo_id, episodes=[0, 2, 6], progress=False)
    assert isinstance(e.value, ConnectionError)
    cut = [r for r in lib_requests(server, "GET", DATA0) if r.bytes_sent == 70_000]
    assert 2 <= len(cut) <= 20, f"{len(cut)} cut row-group reads: retries must happen and be bounded"
    assert _assert_committed_episodes_are_whole(store, local, repo) == [0]

    server.clear_faults()
    ds = open_dataset(repo.repo_id, episodes=[0, 2, 6], progress=False)
    assert Path(ds.root).resolve() == store.resolve()
    assert_same_frames(ds, local, "after the drops")


@pytest.mark.parametrize("kind", ["drop", "reset"])
def test_transient_fault_is_retried(hub, env, tmp_path, fast_retries, kind):
    repo = hub.repos["v3"]
    server = hub.server
    server.inject_fault(path_contains=resolve_prefix(repo.repo_id, repo.sha) + "data/", kind=kind, count=1,
                        after_bytes=100, method="GET")  # fmt: skip
    ds = open_dataset(repo.repo_id, episodes=[1, 7], progress=False)
    assert_same_frames(ds, _local(repo, tmp_path, episodes=[1, 7]), f"after a {kind}")
    gets = lib_requests(server, "GET", "/data/")
    assert any(r.status == 0 or (kind == "drop" and r.bytes_sent == 100) for r in gets), "the fault did not fire"


# ------------------------------------------------------------------------------------------------ store by path


def test_store_opened_by_path_fetches_more_episodes_from_the_hub(hub, env, tmp_path):
    repo = hub.repos["v3"]
    first = open_dataset(repo.repo_id, episodes=[0], progress=False)
    src = first.meta.source
    assert (src["kind"], src["repo_id"], src["commit"]) == ("hub", repo.repo_id, repo.sha)
    assert src["endpoint"].rstrip("/") == hub.server.endpoint
    hub.server.reset_stats()
    ds = open_dataset(first.root, episodes=[0, 7], progress=False)
    assert lib_requests(hub.server, "GET", repo.data_files[7]), "episode 7 was not fetched from the Hub"
    assert not lib_requests(hub.server, "GET", "/refs")  # the recorded commit is used as is
    assert_same_frames(ds, _local(repo, tmp_path, episodes=[0, 7]), "store by path")
    assert np.flatnonzero(read_state(Path(first.root)).complete_episodes()).tolist() == [0, 7]


def test_store_copied_elsewhere_keeps_its_hub_source(hub, env, tmp_path):
    """The recorded repo/commit/endpoint travel with the store (nothing else is needed to extend it)."""
    repo = hub.repos["v21"]
    first = open_dataset(repo.repo_id, episodes=[0], progress=False)
    moved = tmp_path / "moved-store"
    shutil.copytree(first.root, moved)
    ds = open_dataset(moved, episodes=[0, 3], progress=False)
    assert_same_frames(ds, _local(repo, tmp_path, episodes=[0, 3]), "moved store")
    assert lerobot_zarr.open_dataset(moved, progress=False).meta.source["repo_id"] == repo.repo_id


def test_same_commit_served_from_another_endpoint_extends_the_store(hub, env, tmp_path):
    """A second server on the same storage (a mirror, or the test Hub restarted on another port) serves the same
    commits: a store keyed by repo and commit is extended from whichever endpoint is configured now."""
    repo = hub.repos["v21"]
    first = open_dataset(repo.repo_id, episodes=[0], progress=False)
    with HubServer(hub.server.storage_dir) as mirror:
        env.monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", mirror.endpoint)
        ds = open_dataset(repo.repo_id, episodes=[0, 4], progress=False)
        assert mirror.requests("GET", "/data/"), "episode 4 was not fetched from the configured endpoint"
        assert mirror.errors == []
    assert Path(ds.root).resolve() == Path(first.root).resolve()
    assert_same_frames(ds, _local(repo, tmp_path, episodes=[0, 4]), "mirror")
