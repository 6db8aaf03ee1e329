"""Where stores go without root=: under $LEROBOT_ZARR_HOME (else $HF_HOME/lerobot_zarr), one per source."""

from __future__ import annotations

import shutil
from pathlib import Path

import huggingface_hub.constants as hf_constants
import pytest

import lerobot_zarr
from lerobot_zarr.testing.sample_data import write_sample_dataset


def test_env_var_sets_the_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "home"))
    assert lerobot_zarr.cache_home() == tmp_path / "home"
    src = write_sample_dataset(tmp_path / "src", n_episodes=2)
    ds = lerobot_zarr.open_dataset(src, progress=False)
    assert Path(ds.root).parent.parent == tmp_path / "home"
    again = lerobot_zarr.open_dataset(src, progress=False)
    assert again.root == ds.root, "the second open reuses the store"


def test_default_is_under_hf_home(tmp_path, monkeypatch):
    monkeypatch.delenv("LEROBOT_ZARR_HOME", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HOME", str(tmp_path / "hf"))
    assert lerobot_zarr.cache_home() == tmp_path / "hf" / "lerobot_zarr"


def test_two_sources_and_a_changed_source_never_share_a_store(tmp_path, monkeypatch):
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "home"))
    a = write_sample_dataset(tmp_path / "a" / "ds", n_episodes=2, seed=1)
    b = write_sample_dataset(tmp_path / "b" / "ds", n_episodes=2, seed=2)  # same folder name, other data
    store_a = lerobot_zarr.open_dataset(a, progress=False).root
    store_b = lerobot_zarr.open_dataset(b, progress=False).root
    assert store_a != store_b
    shutil.rmtree(a)
    write_sample_dataset(a, n_episodes=3, seed=3)  # same path, new content
    store_a2 = lerobot_zarr.open_dataset(a, progress=False).root
    assert store_a2 not in (store_a, store_b)
    assert len(lerobot_zarr.open_dataset(a, progress=False).meta.episode_length) == 3


def test_revision_names_never_leave_the_cache(tmp_path, monkeypatch):
    """Revision names (which a Hub's refs answer can carry) become file names of the offline ref records: quoted,
    they stay single files inside the cache home."""
    import lerobot_zarr.hub.files as hub_files
    import lerobot_zarr.hub.revisions as revisions

    home = tmp_path / "home"
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(home))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    evil = "../../../escape"
    monkeypatch.setattr(revisions, "resolve_revision", lambda repo_id, revision, token=None: (revision, "0" * 40))

    class Stop(Exception):
        pass

    def no_network(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(hub_files, "HubFiles", no_network)
    with pytest.raises(Stop):
        lerobot_zarr.open_dataset("org/name", revision=evil, progress=False)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) == 1 and written[0].parent == home / "hub" / "org--name" / "refs", written
    assert written[0].read_text() == "0" * 40
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)  # the record is what an offline open finds
    with pytest.raises(lerobot_zarr.NotMaterializedError, match="HF_HUB_OFFLINE is set and there is no local store"):
        lerobot_zarr.open_dataset("org/name", revision=evil, progress=False)
