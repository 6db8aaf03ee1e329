"""Writers and mixtures over lazy stores (issue 32, format 5: a first open by ranges leaves the episode table's
other row groups unresolved). A writer on a lazy store behaves as on a resolved one; a mixture of lazy stores
serves the values of resolved ones."""

from __future__ import annotations

import numpy as np
import pytest
from hub_fixtures import sized_hub

import lerobot_zarr
from lerobot_zarr.errors import NotMaterializedError
from lerobot_zarr.lerobot import source_meta
from lerobot_zarr.store.state import read_state
from lerobot_zarr.writing.writer import WritableDataset

hub, env = sized_hub("hub_lazy_writers", (40,), "org/lazyw-{n}", per_file=5)
REPO = "org/lazyw-40"


@pytest.fixture(autouse=True)
def _lazy(monkeypatch):
    monkeypatch.setattr(source_meta, "_FOOTER_FIRST_MIN", 0)  # (a small table: read by ranges as a big one is)


def _batch(ds) -> dict:
    got = ds.get_batch(np.arange(len(ds)))
    return {k: (list(v) if k == "task" else np.asarray(v)) for k, v in got.items()}


def _same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in b:
        assert (a[key] == b[key] if key == "task" else a[key].tobytes() == b[key].tobytes()), key


def test_a_writer_on_a_lazy_store_behaves_as_on_a_resolved_one(hub, env, tmp_path):
    """A writer opened on a lazy store lacking episodes refuses as on any store lacking them (it said "read it
    first": a writer took the lock before resolving); once every episode is in the store (its row groups
    resolved by that open), a writer's edit and deletion give the values of the same edit on a store made from
    the source's folder, its table the source's."""
    folder, root = hub.folders[40], tmp_path / "lazy"
    lerobot_zarr.open_dataset(REPO, episodes=[23], root=root, progress=False)
    before = read_state(root, resolve=False)
    assert before.unresolved
    with pytest.raises(NotMaterializedError, match="not in the local store"):
        WritableDataset(root)
    assert read_state(root, resolve=False).generation == before.generation
    lerobot_zarr.open_dataset(REPO, root=root, progress=False)  # every episode
    plain = tmp_path / "plain"
    lerobot_zarr.open_dataset(folder, root=plain, progress=False)
    for path in (root, plain):
        with WritableDataset(path) as w:
            w.delete_episodes([3, 17])
            with w.edit(5, (2, 9)) as ep:
                ep["observation.state"][:] = 7.0
    lazy, made = lerobot_zarr.open_dataset(root), lerobot_zarr.open_dataset(plain)
    assert not read_state(root, resolve=False).unresolved
    assert lazy.meta.episode_length.tolist() == made.meta.episode_length.tolist()
    _same(_batch(lazy), _batch(made))
