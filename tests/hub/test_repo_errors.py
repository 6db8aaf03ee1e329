"""Hub error cases of open_dataset / inspect against the test Hub server (real huggingface_hub client): missing repo
or revision, private repo without a token, paths leading outside the repo (tree listing, info.json templates),
invalid repo ids, server errors on the metadata calls."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hub_fixtures import assert_same_frames, files_under, lib_requests, server_env

from lerobot_zarr import (
    CorruptSourceError,
    HubAuthError,
    HubError,
    RepoNotFoundError,
    RevisionNotFoundError,
    inspect,
    open_dataset,
)
from lerobot_zarr.lerobot.index_file import INDEX_FILE
from lerobot_zarr.lerobot.source_files import safe_relpath
from lerobot_zarr.store.state import has_commit_point
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

TOKEN = "hf_good"
#: tree entries added to a commit on disk (the server refuses such names in commits, so they are forged)
FORGED_TREE_PATHS = {"org/evil-tree-meta": "meta/../../evil.txt", "org/evil-tree-data": "data/../../../evil.parquet"}
#: info.json data_path templates that leave the dataset folder
EVIL_TEMPLATES = {
    "org/evil-template-v3": ("v3.0", "../../{chunk_index}.parquet"),
    "org/evil-template-abs": ("v3.0", "/tmp/lerobot_zarr_evil/{chunk_index}/{file_index}.parquet"),
    "org/evil-template-v21": ("v2.1", "data/../../../{episode_index}.parquet"),
}


def _forge_tree_entry(storage: Path, sha: str, new_path: str, copy_of: str) -> None:
    doc_path = storage / "commits" / sha[:2] / f"{sha}.json"
    doc = json.loads(doc_path.read_bytes())
    doc["tree"][new_path] = dict(doc["tree"][copy_of])
    doc_path.write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    base = tmp_path_factory.mktemp("hub_errors")
    storage = base / "storage"
    public = write_sample_dataset(base / "public", n_episodes=4, lengths=(10, 20), seed=11)
    setup = HubServer(storage)  # never started: fills the storage, then a fresh server serves it
    shas = {"org/public": setup.add_repo("org/public", public, tags=["v3.0"]),
            "org/private": setup.add_repo("org/private", public, tags=["v3.0"], private=True)}  # fmt: skip
    for repo_id, bad_path in FORGED_TREE_PATHS.items():
        sha = setup.add_repo(repo_id, public, tags=["v3.0"])
        _forge_tree_entry(storage, sha, bad_path, "meta/info.json")
    for repo_id, (version, template) in EVIL_TEMPLATES.items():
        folder = write_sample_dataset(base / repo_id.replace("/", "--"), version=version, n_episodes=2,
                                      lengths=(5, 8), seed=12)  # fmt: skip
        info = json.loads((folder / "meta" / "info.json").read_text())
        info["data_path"] = template
        (folder / "meta" / "info.json").write_text(json.dumps(info, indent=4))
        setup.add_repo(repo_id, folder, tags=[version])
    server = HubServer(storage, tokens={TOKEN: "alice"})
    server.public, server.shas = public, shas
    with server:
        yield server
    assert server.errors == [], server.errors[0]


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path, hub):
    yield from server_env(monkeypatch, tmp_path, hub)


def _stores(env) -> list[Path]:
    return [p for p in (env.zarr_home / "hub").glob("*/*") if has_commit_point(p)] if env.zarr_home.exists() else []


# ------------------------------------------------------------------------------------------------ not found


def test_repo_not_found(hub, env):
    for call in (lambda: open_dataset("org/missing", progress=False), lambda: inspect("org/missing")):
        with pytest.raises(RepoNotFoundError) as e:
            call()
        assert isinstance(e.value, FileNotFoundError) and "org/missing" in str(e.value)
    assert _stores(env) == []


@pytest.mark.parametrize("revision", ["nope", "v9.9", "0" * 40])
def test_revision_not_found(hub, env, revision):
    with pytest.raises(RevisionNotFoundError) as e:
        open_dataset("org/public", revision=revision, progress=False)
    assert isinstance(e.value, FileNotFoundError) and revision in str(e.value)
    with pytest.raises(RevisionNotFoundError):
        inspect("org/public", revision=revision)
    assert _stores(env) == []


# ------------------------------------------------------------------------------------------------ private


def test_private_repo_needs_a_token(hub, env, tmp_path):
    for token in (None, False, "hf_wrong"):
        with pytest.raises((HubAuthError, RepoNotFoundError)) as e:
            open_dataset("org/private", token=token, episodes=[0], progress=False)
        # the library's choice: a 401 is an authorization error (PermissionError), not "repository not found"
        assert isinstance(e.value, HubAuthError) and isinstance(e.value, PermissionError), type(e.value)
        assert "token" in str(e.value) and "org/private" in str(e.value)
        with pytest.raises(HubAuthError):
            inspect("org/private", token=token)
    assert _stores(env) == []
    assert not lib_requests(hub, "GET", "/data/")

    ds = open_dataset("org/private", token=TOKEN, episodes=[0], progress=False)
    local = open_dataset(hub.public, root=tmp_path / "local", episodes=[0], progress=False)
    assert_same_frames(ds, local, "private repo with a token")
    assert inspect("org/private", token=TOKEN).total_episodes == 4
    assert TOKEN not in json.dumps(ds.meta.source)  # the token is not recorded in the store

    # extending the store later needs the token again
    with pytest.raises(HubAuthError):
        open_dataset(ds.root, episodes=[0, 2], progress=False)
    more = open_dataset(ds.root, episodes=[0, 2], token=TOKEN, progress=False)
    assert np.flatnonzero(more.meta.materialized_episodes).tolist() == [0, 2]


def test_public_repo_on_a_server_with_auth_needs_no_token(hub, env, tmp_path):
    ds = open_dataset("org/public", episodes=[3], progress=False)
    local = open_dataset(hub.public, root=tmp_path / "local", episodes=[3], progress=False)
    assert_same_frames(ds, local, "public")
    assert all("authorization" not in r.path.lower() for r in hub.requests())


# ------------------------------------------------------------------------------------------------ paths


def _files_outside(tmp_path: Path, env) -> list[Path]:
    """Files written under the test's tmp folder but outside lerobot_zarr's home and the HF home."""
    return [p for p in files_under(tmp_path)
            if not p.is_relative_to(env.zarr_home) and not p.is_relative_to(env.hf_home)]  # fmt: skip


@pytest.mark.parametrize("repo_id", sorted(FORGED_TREE_PATHS))
def test_tree_listing_with_a_path_outside_the_repo_is_refused(hub, env, tmp_path, repo_id):
    bad = FORGED_TREE_PATHS[repo_id]
    assert bad in hub.list_files(repo_id)  # the server does list it
    with pytest.raises(CorruptSourceError) as e:
        open_dataset(repo_id, progress=False)
    assert bad in str(e.value)
    with pytest.raises(CorruptSourceError):
        inspect(repo_id)
    assert _stores(env) == []
    assert _files_outside(tmp_path, env) == []
    assert [p for p in files_under(tmp_path) if p.name.startswith("evil")] == []
    # refused from the listing, before any file is read (but our index, whose fixed name is asked for with it)
    reads = [r.path.rsplit("/resolve/", 1)[1].split("/", 1)[1] for r in lib_requests(hub, "GET", "/resolve/")]
    assert set(reads) <= {INDEX_FILE}, reads


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "meta/../../x", "data/../..", "a\\..\\b", "", "."])
def test_safe_relpath_refuses_paths_leaving_the_folder(bad):
    """What HubFiles applies to every tree entry (absolute tree paths cannot be served by the test server)."""
    with pytest.raises(CorruptSourceError):
        safe_relpath("org/x@main", bad, "repository file")


def test_safe_relpath_keeps_normal_paths():
    assert safe_relpath("w", "meta/./info.json", "f") == "meta/info.json"
    assert safe_relpath("w", "data/chunk-000/file-000.parquet", "f") == "data/chunk-000/file-000.parquet"


@pytest.mark.parametrize("repo_id", sorted(EVIL_TEMPLATES))
def test_data_path_template_leading_outside_is_refused(hub, env, tmp_path, repo_id):
    template = EVIL_TEMPLATES[repo_id][1]
    with pytest.raises(CorruptSourceError) as e:
        open_dataset(repo_id, progress=False)
    assert "data_path" in str(e.value) or "leaves the dataset folder" in str(e.value)
    assert _files_outside(tmp_path, env) == []
    assert [p for p in files_under(env.zarr_home) if p.suffix == ".parquet"] == []
    assert not (env.zarr_home / "hub" / "0.parquet").exists() and not (env.zarr_home / "0.parquet").exists()
    if template.startswith("/"):
        assert not Path(template.split("{")[0]).exists()
    assert not lib_requests(hub, "GET", "/data/")
    assert not [r for r in hub.requests() if ".." in r.path]


# ------------------------------------------------------------------------------------------------ repo ids


BAD_IDS = ["a/b/c", "org/../x"]  # "../x" is a path: SourceNotFoundError (test_resolve)


@pytest.mark.parametrize("repo_id", BAD_IDS)
def test_invalid_repo_id_inspect_raises_value_error(hub, env, repo_id):
    with pytest.raises(ValueError):
        inspect(repo_id)
    assert lib_requests(hub) == []


@pytest.mark.parametrize("repo_id", BAD_IDS)
def test_invalid_repo_id_open_dataset_raises_value_error(hub, env, repo_id):
    with pytest.raises(ValueError):
        open_dataset(repo_id, revision="main", progress=False)
    assert lib_requests(hub) == []
    assert not env.zarr_home.exists() or files_under(env.zarr_home) == []


# ------------------------------------------------------------------------------------------------ server errors


def test_server_error_on_revision_lookup_is_a_hub_error(hub, env):
    hub.inject_fault(path_contains="/api/datasets/org/public/refs", kind="500", count=50)
    with pytest.raises(HubError) as e:
        open_dataset("org/public", progress=False)
    assert isinstance(e.value, ConnectionError) and "org/public" in str(e.value)
    assert 1 <= len(lib_requests(hub, "GET", "/refs")) <= 10
    assert _stores(env) == []
