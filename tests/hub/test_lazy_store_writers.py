"""Writers and mixtures over lazy stores (issue 32, format 5: a first open by ranges leaves the episode table's
other row groups unresolved). A writer on a lazy store behaves as on a resolved one; a mixture of lazy stores
serves the values of resolved ones."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from hub_fixtures import sized_hub

import lerobot_zarr
from lerobot_zarr.errors import NotMaterializedError, StoreLockedError
from lerobot_zarr.lerobot import source_meta
from lerobot_zarr.store.state import StoreState, read_state
from lerobot_zarr.utils.fileio import WriterLock
from lerobot_zarr.writing.writer import WritableDataset

hub, env = sized_hub("hub_lazy_writers", (40, 30), "org/lazyw-{n}", per_file=5)
REPO = "org/lazyw-40"


@pytest.fixture(autouse=True)
def _lazy(monkeypatch):
    monkeypatch.setattr(source_meta, "_FOOTER_FIRST_MIN", 0)  # (a small table: read by ranges as a big one is)


def _batch(ds) -> dict:
    got = ds.get_batch(np.arange(len(ds)))
    return {k: (list(v) if k == "task" else np.asarray(v)) for k, v in got.items()}


def _same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key, want in b.items():
        assert (a[key] == want if key == "task" else a[key].tobytes() == want.tobytes()), key


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


@pytest.mark.parametrize("lazy_ones", [("org/lazyw-40", "org/lazyw-30"), ("org/lazyw-40",)])
def test_a_mixture_of_lazy_stores_serves_the_values_of_resolved_ones(hub, env, tmp_path, lazy_ones):
    """A mixture over lazy stores (or a lazy store beside one made from a folder), its windows crossing episode
    edges and its weights by frames, serves every sample and weight of the same mixture over stores made from the
    source folders (every episode's length known from the start); opening it does not resolve the lazy stores (it
    read every episode's length through meta: the source's whole table, and offline an error), offline too, nor
    does a stream of a lazy store's episodes; their meta then resolves them to the same lengths and starts."""
    repos = {"org/lazyw-40": ([23, 5, 25], 40), "org/lazyw-30": ([12], 30)}
    fps = json.loads((hub.folders[40] / "meta/info.json").read_text())["fps"]
    window = {"action": [-2 / fps, 0.0, 1 / fps], "observation.state": [-1 / fps, 0.0]}

    def mixture(kind: str, use_hub) -> lerobot_zarr.LeRobotZarrMixture:
        name = {repo: repo if use_hub(repo) else str(hub.folders[n]) for repo, (_, n) in repos.items()}
        return lerobot_zarr.open_mixture([name[r] for r in repos], weights="frames", delta_timestamps=window,
                                         episodes={name[r]: e for r, (e, _) in repos.items()},
                                         root={name[r]: tmp_path / kind / r.replace("/", "-") for r in repos},
                                         progress=False)

    got = mixture("lazy", lambda repo: repo in lazy_ones)
    for repo in lazy_ones:
        assert read_state(tmp_path / "lazy" / repo.replace("/", "-"), resolve=False).unresolved
    want = mixture("made", lambda repo: False)
    assert len(got) == len(want) and np.array_equal(got.weights, want.weights)
    idx = np.arange(len(want))
    _same({k: (list(v) if k == "task" else np.asarray(v)) for k, v in got.get_batch(idx).items()},
          {k: (list(v) if k == "task" else np.asarray(v)) for k, v in want.get_batch(idx).items()})
    env.offline(True)  # the lazy stores reopened without the network: their episodes need no resolution
    again = mixture("lazy", lambda repo: repo in lazy_ones)
    _same({k: (list(v) if k == "task" else np.asarray(v)) for k, v in again.get_batch(idx).items()},
          {k: (list(v) if k == "task" else np.asarray(v)) for k, v in want.get_batch(idx).items()})
    for repo in lazy_ones:
        assert read_state(tmp_path / "lazy" / repo.replace("/", "-"), resolve=False).unresolved
    lazy40 = tmp_path / "lazy" / "org-lazyw-40"
    streamed = lerobot_zarr.stream(lazy40, episodes=[23, 5], shuffle=False, batch_size=1000)
    plain = lerobot_zarr.stream(tmp_path / "made" / "org-lazyw-40", episodes=[23, 5], shuffle=False, batch_size=1000)
    a, b = next(iter(streamed)), next(iter(plain))
    _same({k: (list(v) if k == "task" else np.asarray(v)) for k, v in a.items()},
          {k: (list(v) if k == "task" else np.asarray(v)) for k, v in b.items()})
    assert read_state(lazy40, resolve=False).unresolved
    env.offline(False)
    for a, b in zip(got.datasets, want.datasets, strict=True):
        assert a.meta.episode_length.tolist() == b.meta.episode_length.tolist()
        assert a.meta.episode_start.tolist() == b.meta.episode_start.tolist()


def test_resolving_offline_names_the_repo_and_what_needs_it(hub, env, tmp_path):
    """Offline, what needs every episode's length of a lazy store (meta's episode arrays, verify, an export) refuses
    naming the repo, the unresolved episodes and HF_HUB_OFFLINE (it said "episodes [0, 10, 30] are not in the
    store": the first episode of each unresolved row group, as if they were wanted); the store is left as it was,
    its episodes still served, by the repo or by the store's path (a store opened without episodes serves those it
    holds: no resolution)."""
    root = tmp_path / "lazy"
    lerobot_zarr.open_dataset(REPO, episodes=[23], root=root, progress=False)
    before = read_state(root, resolve=False)
    env.offline(True)
    ds = lerobot_zarr.open_dataset(REPO, episodes=[23], root=root, progress=False)
    with pytest.raises(NotMaterializedError, match=r"(?s)lengths of episodes \[0, 10\).*org/lazyw-40.*OFFLINE"):
        _ = ds.meta.episode_length
    assert read_state(root, resolve=False).unresolved == before.unresolved
    assert len(ds.get_batch(np.arange(len(ds)))["index"]) == len(ds)
    for needs_all in (lambda: lerobot_zarr.verify(root), lambda: ds.to_lerobot(tmp_path / "out")):
        with pytest.raises(NotMaterializedError, match=r"(?s)lengths of episodes.*org/lazyw-40.*OFFLINE"):
            needs_all()
    # the store opened by its path, every episode it holds (it asked for every episode's length: the network)
    held = lerobot_zarr.open_dataset(root)
    assert held.episodes.tolist() == [23]
    _same(_batch(held), _batch(ds))
    assert read_state(root, resolve=False).unresolved == before.unresolved


def test_resolving_waits_for_a_lock_another_thread_holds(hub, env, tmp_path):
    """A thread resolving a lazy store while another thread of the process holds its writer lock (a fetch's commit)
    waits for it, as for another process's, then resolves (it raised StoreLockedError, "this process" holding
    it); the thread that holds the lock is refused (it would wait for itself)."""
    root = tmp_path / "lazy"
    lerobot_zarr.open_dataset(REPO, episodes=[23], root=root, progress=False)
    got: list = []
    with WriterLock(root):
        with pytest.raises(StoreLockedError, match="this thread"):
            read_state(root)

        def resolve() -> None:
            try:
                got.append(read_state(root))
            except Exception as exc:  # noqa: BLE001  (the test reports it)
                got.append(exc)

        thread = threading.Thread(target=resolve)
        thread.start()
        thread.join(2.0)  # (a chance to reach the lock while it is held; the outcome is checked either way)
    thread.join(120.0)
    assert not thread.is_alive() and len(got) == 1 and isinstance(got[0], StoreState), got
    assert not got[0].unresolved and not read_state(root, resolve=False).unresolved


def test_two_resolving_at_once_commit_once(hub, env, tmp_path):
    """Two threads resolving the same lazy store at once (each its own source read, each its own lock file
    descriptor, as two processes) both get the resolved state of one commit: the second finds nothing left."""
    root = tmp_path / "lazy"
    lerobot_zarr.open_dataset(REPO, episodes=[23], root=root, progress=False)
    before = read_state(root, resolve=False).generation
    start = threading.Barrier(2)
    got: list = []

    def resolve() -> None:
        try:
            start.wait(60.0)
            got.append(read_state(root))
        except Exception as exc:  # noqa: BLE001  (the test reports it)
            got.append(exc)

    threads = [threading.Thread(target=resolve) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120.0)
    assert len(got) == 2 and all(isinstance(s, StoreState) and not s.unresolved for s in got), got
    assert {s.generation for s in got} == {before + 1} == {read_state(root, resolve=False).generation}
