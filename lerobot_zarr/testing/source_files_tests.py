"""The conformance suite of :class:`~lerobot_zarr.lerobot.source_files.SourceFiles`, in the pattern of zarr's
``StoreTests``: a test class of an implementation inherits :class:`SourceFilesTests` and gives a ``files`` fixture,
the implementation over a copy of the LeRobot dataset folder given by the ``folder`` fixture (written here: a
v3.0 dataset with a PNG camera and an mp4 video, several row groups per file). Every method the source reader
calls is checked against the folder read with the standard library and pyarrow.

Usage (pytest)::

    class TestLocalFiles(SourceFilesTests):
        @pytest.fixture
        def files(self, folder):
            return LocalFiles(folder)
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from ..lerobot.source import LeRobotSource
from ..lerobot.source_files import SourceFiles
from .sample_data import write_sample_dataset

__all__ = ["SourceFilesTests", "sample_folder"]


def sample_folder(path: Path) -> Path:
    """The dataset the suite reads: 8 episodes in two data files, a PNG camera, an mp4 video per episode."""
    return write_sample_dataset(path, n_episodes=8, episodes_per_file=4, image_keys=("observation.images.png",),
                                video_keys=("observation.images.cam",), write_videos=True, seed=3)


class SourceFilesTests:
    """Tests every implementation of ``SourceFiles`` passes (see the module docstring)."""

    @pytest.fixture(scope="class")
    @classmethod
    def folder(cls, tmp_path_factory) -> Path:
        return sample_folder(tmp_path_factory.mktemp("source_files") / "dataset")

    @pytest.fixture
    def files(self, folder: Path) -> SourceFiles:  # pragma: no cover  (given by each implementation)
        raise NotImplementedError("a SourceFilesTests subclass gives the files fixture")

    @staticmethod
    def every_file(folder: Path) -> list[str]:
        return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())

    def test_is_source_files(self, files):
        assert isinstance(files, SourceFiles)
        assert isinstance(files.name, str) and files.name
        assert isinstance(files.concurrency, int) and files.concurrency >= 1

    def test_listing_sizes_and_bytes(self, files, folder):
        every = self.every_file(folder)
        for top in ("meta", "data", "videos"):
            assert files.list(top) == [rel for rel in every if rel.startswith(top + "/")], top
        for rel in every:
            assert files.exists(rel)
            assert files.size(rel) == (folder / rel).stat().st_size
            assert files.read_bytes(rel) == (folder / rel).read_bytes(), rel
        assert not files.exists("meta/nope.json")
        with pytest.raises(FileNotFoundError):
            files.read_bytes("meta/nope.json")
        with pytest.raises(FileNotFoundError):
            files.size("meta/nope.json")
        assert dict(files.sizes) in ({}, {rel: (folder / rel).stat().st_size for rel in every})

    def test_a_file_is_found_before_its_folder_is_listed(self, files, folder):
        """A source may list its folders as they are needed (a bucket): a file asked for first (its existence, its
        size, its bytes) is found all the same, a missing one is not, and the hint to size files ahead changes no
        answer; what ``sizes`` holds meanwhile is right."""
        every = self.every_file(folder)
        data, videos = [r for r in every if r.startswith("data/")], [r for r in every if r.startswith("videos/")]
        assert files.size(data[-1]) == (folder / data[-1]).stat().st_size
        assert files.read_bytes(videos[0]) == (folder / videos[0]).read_bytes()
        missing = data[0].rsplit("/", 1)[0] + "/file-999.parquet"
        assert not files.exists(missing) and not files.exists("nope/x.parquet") and not files.exists("data/x/y/z")
        with pytest.raises(FileNotFoundError):
            files.size(missing)
        files.prefetch_sizes([*data, *videos, missing], folders=["meta", "nope"])
        for rel in every:
            assert files.exists(rel) and files.size(rel) == (folder / rel).stat().st_size, rel
        assert not files.exists(missing)
        assert all(size == (folder / rel).stat().st_size for rel, size in dict(files.sizes).items())

    def test_location_names_the_file(self, files):
        assert "meta/info.json" in files.location("meta/info.json")
        assert files.location() and files.location() != files.location("meta/info.json")

    def test_parquet_reads_the_row_groups_asked(self, files, folder):
        for rel in files.list("data"):
            want = pq.ParquetFile(folder / rel)
            got = files.parquet(rel)
            assert got.metadata.num_row_groups == want.metadata.num_row_groups
            for g in (0, want.metadata.num_row_groups - 1):
                assert got.read_row_group(g).equals(want.read_row_group(g)), (rel, g)
            again = files.parquet(rel, metadata=got.metadata)  # the footer given: not read again
            assert again.read_row_group(0).equals(want.read_row_group(0))

    def test_open_reads_any_range(self, files, folder):
        rel = files.list("videos")[0]
        data = (folder / rel).read_bytes()
        with files.open(rel) as f:
            assert f.seekable() and f.read(16) == data[:16]
            f.seek(len(data) - 100)
            assert f.read() == data[-100:]
            f.seek(len(data) // 3)
            assert f.read(1000) == data[len(data) // 3:len(data) // 3 + 1000]
            assert f.tell() == len(data) // 3 + 1000
            f.seek(0)
            assert f.read() == data

    def test_hints_change_no_answer(self, files, folder):
        meta = files.list("meta")
        data = files.list("data")
        files.prefetch(meta + ["meta/nope.json"])
        files.prefetch_footers(data)
        size = files.size(data[0])
        files.footer_hint(data[0], 4096)
        files.prefetch_ranges({data[0]: [(0, min(size, 100)), (size // 2, size // 2 + 10)]})
        files.prefetch_ranges({data[-1]: [(0, 10), (files.size(data[-1]) - 10, files.size(data[-1]))]}, gap=0)
        files.prefetch([], footers={data[1]: 16, data[-1]: 10 * size})  # an estimate short or long of the footer
        files.seed_footer(data[0], size=None)
        for rel in data:
            assert files.parquet(rel).metadata.num_rows == pq.ParquetFile(folder / rel).metadata.num_rows, rel
        for rel in meta + data:
            assert files.read_bytes(rel) == (folder / rel).read_bytes(), rel
            files.release(rel)

    def test_identity(self, files, folder):
        record = files.record(files.list("data"))
        assert isinstance(record, dict) and isinstance(record.get("kind"), str)
        assert json.loads(json.dumps(record)) == record  # it goes into a store's JSON root
        assert files.record(files.list("data")) == record  # the same files: the same record
        assert files.matches("meta/info.json", {"sha256": "0" * 64, "git_sha1": "0" * 40}) is False

    def test_local_path_is_the_file_or_none(self, files, folder):
        for rel in ("meta/info.json", files.list("videos")[0]):
            path = files.local_path(rel)
            assert path is None or Path(path).read_bytes() == (folder / rel).read_bytes()

    def test_the_source_reader_reads_it_as_the_folder(self, files, folder):
        got, want = LeRobotSource(files), LeRobotSource(folder)
        assert got.info == want.info and got.tasks == want.tasks
        assert np.array_equal(got.episodes.length, want.episodes.length)
        a, b = dict(got.iter_episodes([0, 5])), dict(want.iter_episodes([0, 5]))
        assert a.keys() == b.keys() == {0, 5}
        for e in a:
            assert a[e].keys() == b[e].keys()
            for key in a[e]:
                assert np.array_equal(np.asarray(a[e][key]), np.asarray(b[e][key])), (e, key)
        frames = []
        got.decode_video(5, "observation.images.cam", np.arange(3) / got.fps, frames.append)
        expected = []
        want.decode_video(5, "observation.images.cam", np.arange(3) / want.fps, expected.append)
        assert frames == expected and len(frames) == 3

    def test_pickles_as_what_it_reads(self, files, folder):
        try:
            copy = pickle.loads(pickle.dumps(files))
        except (TypeError, pickle.PicklingError):
            pytest.skip(f"{type(files).__name__} does not go to other processes")
        rel = files.list("data")[0]
        assert copy.read_bytes(rel) == (folder / rel).read_bytes()
