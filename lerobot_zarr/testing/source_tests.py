"""The conformance suite of the kinds of sources (:class:`~lerobot_zarr.sources.base.Source`), in the pattern of
zarr's ``StoreTests``: a test class of a kind inherits :class:`SourceTests` and gives a ``spec`` fixture (what a
user passes as ``source``: a path, a repo id, a URL) naming a source that holds the dataset of the ``folder``
fixture (a LeRobot dataset written here), either as that dataset (``holds = "lerobot"``) or as a store made from
it (``holds = "store"``). The suite checks the kind through the interface and through ``open_dataset``: what it
can open, its record in a store and back, its place in the cache, and that its values equal the folder's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from ..api import inspect, open_dataset
from ..errors import ArgumentError
from ..sources.base import Source
from ..sources.home import cache_home
from ..sources.registry import describe_record, kind_of_record, kinds, same_source
from ..sources.resolve import resolve_source
from ..store.state import read_state
from .sample_data import write_sample_dataset

__all__ = ["SourceTests", "DELTAS", "assert_same_batches", "published_store"]

DELTAS = {"observation.state": [-1 / 30, 0.0], "action": [0.0, 1 / 30, 2 / 30]}


def published_store(folder: Path, url: str, tmp_path: Path) -> str:
    """``url`` (a bucket folder) holding a store made from the LeRobot dataset ``folder`` (made at
    ``tmp_path / "store"``, then published): the ``spec`` of a bucket kind's store class (``holds = "store"``)."""
    from ..writing.sync import push_store

    push_store(open_dataset(folder, root=tmp_path / "store", progress=False).root, url, progress=False)
    return url


def assert_same_batches(got, want, where: str, episodes: list[int] | None = None) -> None:
    """Every sample of ``got`` equals ``want``'s (keys, dtypes, values), in one batch."""
    assert len(got) == len(want), where
    idx = np.arange(len(want))
    a, b = got.get_batch(idx), want.get_batch(idx)
    assert a.keys() == b.keys(), where
    for key in b:
        if isinstance(b[key], list):  # task, text features: lists of str (LeRobot's row dicts for language)
            assert a[key] == b[key], (where, key)
        else:
            assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), (where, key)


class SourceTests:
    """Tests every kind of source passes (see the module docstring)."""

    #: what the source holds: the LeRobot dataset itself, or a store made from it
    holds: ClassVar[str] = "lerobot"

    @pytest.fixture(scope="class")
    @classmethod
    def folder(cls, tmp_path_factory) -> Path:
        return write_sample_dataset(tmp_path_factory.mktemp("source_kind") / "dataset", n_episodes=5,
                                    episodes_per_file=3, image_keys=("observation.images.cam",), seed=7)

    @pytest.fixture
    def spec(self, folder) -> str:  # pragma: no cover  (given by each kind)
        raise NotImplementedError("a SourceTests subclass gives the spec fixture")

    @pytest.fixture
    def reference(self, folder, tmp_path):
        return open_dataset(folder, root=tmp_path / "reference", delta_timestamps=DELTAS, progress=False)

    def test_is_a_registered_kind_that_opens_the_spec(self, spec):
        source = resolve_source(spec)
        assert isinstance(source, Source) and type(source) in kinds()
        assert type(source).guess_can_open(spec)
        others = [k for k in kinds() if k is not type(source) and k.guess_can_open(spec)]
        assert all(kinds().index(k) > kinds().index(type(source)) for k in others), others  # it is asked first
        assert str(source)

    def test_values_equal_the_folder(self, spec, reference):
        ds = open_dataset(spec, delta_timestamps=DELTAS, progress=False)
        assert_same_batches(ds, reference, str(spec))
        part = open_dataset(spec, episodes=[1, 3], delta_timestamps=DELTAS, progress=False)
        assert_same_batches(part, reference.select([1, 3]), f"{spec} episodes 1, 3")

    def test_inspect(self, spec, reference):
        meta = inspect(spec)
        assert meta.total_episodes == reference.meta.total_episodes
        assert np.array_equal(meta.episode_length, reference.meta.episode_length)
        assert meta.tasks == reference.meta.tasks and list(meta.features) == list(reference.meta.features)

    def test_record_in_a_store_and_back(self, spec):
        source = resolve_source(spec)
        if self.holds == "store":
            remote = source.remote() if source.store() is None else None
            state = read_state(source.store() if remote is None else remote.root)
            assert len(state.table) == 5
            with pytest.raises(ArgumentError):
                source.dataset()  # a store is no LeRobot dataset to transcode
            assert source.held_dataset() is None
            return
        assert source.held_dataset() is None  # nothing read yet
        reader = source.dataset()
        assert source.held_dataset() is reader and source.dataset() is reader  # made once, then held
        record = reader.record()
        assert json.loads(json.dumps(record)) == record
        kind = kind_of_record(record)
        assert kind is type(source) and kind.same(record, record) and same_source(record, record)
        assert same_source({"kind": "edited", "from": record}, record)  # a store edited in place: still its data
        text = describe_record(record)
        assert text and text == kind.describe(record)
        again = kind.from_record(record)
        assert same_source(record, again.dataset().record())

    def test_cache_path_and_cache_listing(self, spec):
        source = resolve_source(spec)
        if self.holds == "store":
            return
        path = source.cache_path()
        assert path.is_relative_to(cache_home() / type(source).cache_folder)
        ds = open_dataset(spec, episodes=[0], progress=False)
        assert Path(ds.root).resolve() == path.resolve()
        assert path in list(type(source).cached_stores(cache_home() / type(source).cache_folder))
        from ..sources.cache import cache_info

        listed = [s for s in cache_info() if s.path == path]
        assert len(listed) == 1 and listed[0].episodes == 1 and listed[0].status == "ok", listed
        assert same_source(read_state(path).source, source.dataset().record())
