"""A pytest plugin that runs LeRobot's own dataset tests against lerobot_zarr's drop-ins.

Loaded with ``-p conformance_plugin`` (this folder and the checkout on ``PYTHONPATH``) in a pytest run of LeRobot's
test suite from its source folder; ``scripts/conformance.py`` runs it and compares. Before LeRobot's conftest and
test modules are imported, it rebinds the names in LeRobot's modules (and so in every test module that imports them
afterwards):

- ``LeRobotDataset`` -> :class:`lerobot_zarr.torch.LeRobotDataset` (through ``DropIn``, below);
- ``LeRobotDatasetMetadata`` -> :class:`lerobot_zarr.torch.LeRobotDatasetMetadata` where LeRobot's code reads a
  dataset's metadata on its own (``aggregate_datasets``' sources, ``make_dataset``); its ``create`` stays LeRobot's,
  as do the tests of LeRobot's metadata class itself and its streaming dataset;
- ``ReplayBuffer`` (``lerobot.rl.buffer``) -> :class:`lerobot_zarr.rl.ReplayBuffer`.

``--drop-in`` chooses the mode:

- ``lerobot``: rebind nothing (the baseline: LeRobot's own classes);
- ``read``: the drop-in reads, LeRobot records. ``LeRobotDataset.create`` / ``resume`` stay LeRobot's: they return
  a :class:`Recording`, whose writing calls go to LeRobot's dataset and whose reads, once it is finalized, go to a
  drop-in opened on the folder LeRobot wrote. Datasets the fixtures "download" (LeRobot's tests mock
  ``snapshot_download`` to write the files) are fetched the same way before the drop-in opens them;
- ``full``: the drop-in alone, recording included (needs ``LeRobotDataset.create`` of our own).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

MODES = ("lerobot", "read", "full")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--drop-in", choices=MODES, default="read",
                     help="lerobot: LeRobot's own classes; read: lerobot_zarr's drop-ins read what LeRobot "
                          "records; full: the drop-ins alone")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Rebind before LeRobot's conftest (and the fixture modules it loads) import the names."""
    mode = early_config.known_args_namespace.drop_in
    if mode != "lerobot":
        install(mode)


def pytest_report_header(config: pytest.Config) -> str:
    mode = config.getoption("drop_in")
    import lerobot_zarr

    where = "" if mode == "lerobot" else f" (lerobot_zarr from {Path(lerobot_zarr.__file__).parent})"
    return f"lerobot_zarr conformance: --drop-in={mode}{where}"


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """LeRobot's tests encode with SVT-AV1 in the test process, which run by root leaves threads at real-time
    priority (``lerobot_zarr.utils.sched``): put back under the normal scheduler for the next tests, in every mode."""
    from lerobot_zarr.utils.sched import drop_realtime

    drop_realtime()


def rebind(old: Any, new: Any) -> None:
    """Every module global of LeRobot's package and its tests bound to ``old`` now names ``new``."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "lerobot" or name.startswith(("lerobot.", "tests."))):
            continue
        for attr, value in list(vars(module).items()):
            if value is old:
                setattr(module, attr, new)


def install(mode: str) -> None:
    """Rebind LeRobot's names (every module imports them at import time: import those modules first)."""
    import lerobot.datasets.dataset_tools  # noqa: F401
    import lerobot.rl.buffer as lerobot_buffer
    from lerobot.datasets import aggregate, dataset_metadata, factory, lerobot_dataset

    from lerobot_zarr.rl import ReplayBuffer
    from lerobot_zarr.torch import LeRobotDataset, LeRobotDatasetMetadata

    original = lerobot_dataset.LeRobotDataset
    if mode == "full" and not callable(getattr(LeRobotDataset, "create", None)):
        raise pytest.UsageError("--drop-in=full needs the drop-in's own recording (LeRobotDataset.create): "
                                "this lerobot_zarr reads only; use --drop-in=read")
    drop_in = _drop_in_class(LeRobotDataset, original, lerobot_dataset, record_with_lerobot=mode == "read")
    rebind(original, drop_in)
    rebind(lerobot_buffer.ReplayBuffer, ReplayBuffer)
    meta = _drop_in_meta_class(LeRobotDatasetMetadata, dataset_metadata)
    for module in (aggregate, factory):
        module.LeRobotDatasetMetadata = meta


def _drop_in_class(ours: type, original: type, lerobot_dataset: Any, *, record_with_lerobot: bool) -> type:
    class DropIn(ours):
        """The drop-in, with what the test fixtures need around it: a folder the fixtures mean to download first
        comes from their mock Hub (``lerobot.datasets.lerobot_dataset.snapshot_download``, which the fixtures
        patch to write the files), and in ``read`` mode, recording stays LeRobot's."""

        def __init__(self, repo_id: str, root: str | Path | None = None, *args: Any, **kwargs: Any):
            if root is not None and _lacks_data(Path(root)):
                Path(root).mkdir(parents=True, exist_ok=True)
                lerobot_dataset.snapshot_download(repo_id, repo_type="dataset", local_dir=root)
            super().__init__(repo_id, root, *args, **kwargs)

        if record_with_lerobot:
            @classmethod
            def create(cls, *args: Any, **kwargs: Any) -> Recording:
                return Recording(original.create(*args, **kwargs), cls)

            @classmethod
            def resume(cls, *args: Any, **kwargs: Any) -> Recording:
                return Recording(original.resume(*args, **kwargs), cls)

    DropIn.__name__ = DropIn.__qualname__ = "LeRobotDataset"
    DropIn.__module__ = "lerobot.datasets.lerobot_dataset"

    class Recording(DropIn):
        """A dataset LeRobot's own ``create``/``resume`` records: its writing API is LeRobot's object; once
        finalized, what reads (items, ``meta``, lengths...) is a drop-in opened on the folder it wrote, opened again
        when the folder changed since (more recorded, or a LeRobot tool rewrote it in place: LeRobot's recorder
        reads the folder when first read, so it sees such changes)."""

        def __init__(self, recorder: Any, reader_class: type):
            object.__setattr__(self, "_recorder", recorder)
            object.__setattr__(self, "_reader_class", reader_class)
            object.__setattr__(self, "_opened", None)

        def _reader(self) -> Any:
            rec = object.__getattribute__(self, "_recorder")
            key = (_signature(Path(rec.root)), id(rec.image_transforms), repr(rec.delta_timestamps),
                   repr(rec.episodes))
            opened = object.__getattribute__(self, "_opened")
            if opened is None or opened[0] != key:
                reader = object.__getattribute__(self, "_reader_class")(
                    rec.repo_id, rec.root, rec.episodes, image_transforms=rec.image_transforms,
                    delta_timestamps=rec.delta_timestamps, tolerance_s=rec.tolerance_s)
                object.__setattr__(self, "_opened", (key, reader))
                return reader
            return opened[1]

        def _reading(self) -> bool:
            rec = object.__getattribute__(self, "_recorder")
            return bool(getattr(rec, "_is_finalized", False)) and rec.meta.total_episodes > 0

        def __getattribute__(self, name: str) -> Any:
            if name == "__dict__":  # vars(): the attributes of LeRobot's recorder, which this stands for
                return vars(object.__getattribute__(self, "_recorder"))
            if name.startswith("__") or name in Recording.__dict__:
                return object.__getattribute__(self, name)
            if name in _READS and self._reading():
                return getattr(self._reader(), name)
            return getattr(object.__getattribute__(self, "_recorder"), name)

        def __setattr__(self, name: str, value: Any) -> None:
            setattr(object.__getattribute__(self, "_recorder"), name, value)

        def __getitem__(self, idx: Any) -> Any:
            return self._reader()[idx] if self._reading() else object.__getattribute__(self, "_recorder")[idx]

        def __getitems__(self, indices: list[int]) -> Any:
            return self._reader().__getitems__(indices) if self._reading() else [self[i] for i in indices]

        def __len__(self) -> int:
            return len(self._reader()) if self._reading() else len(object.__getattribute__(self, "_recorder"))

        def __repr__(self) -> str:
            return repr(self._reader()) if self._reading() else repr(object.__getattribute__(self, "_recorder"))

    return DropIn


def _drop_in_meta_class(ours: type, dataset_metadata: Any) -> type:
    original = dataset_metadata.LeRobotDatasetMetadata

    class DropInMeta(ours):
        """The drop-in's metadata read on its own; a folder the fixtures mean to download first comes from their mock
        Hub (``lerobot.datasets.dataset_metadata.snapshot_download``); ``create`` is LeRobot's (a recorder's)."""

        def __init__(self, repo_id: str, root: str | Path | None = None, revision: str | None = None,
                     *args: Any, **kwargs: Any):
            if root is not None and not (Path(root) / "meta" / "info.json").is_file():
                Path(root).mkdir(parents=True, exist_ok=True)
                dataset_metadata.snapshot_download(repo_id, repo_type="dataset", revision=revision, local_dir=root,
                                                   allow_patterns="meta/")
            super().__init__(repo_id, root, revision, *args, **kwargs)

        create = staticmethod(original.create)

    DropInMeta.__name__ = DropInMeta.__qualname__ = "LeRobotDatasetMetadata"
    return DropInMeta


# What a finalized recording reads through the drop-in: its reading API, and LeRobot's reading internals (which the
# drop-in lacks: a test reading them fails as it would on the drop-in). Its writing API stays LeRobot's object.
_READS = frozenset({
    "meta", "features", "fps", "num_frames", "num_episodes", "depth_output_unit", "select_columns", "get_raw_item",
    "hf_dataset", "reader", "absolute_to_relative_idx",
})


def _signature(root: Path) -> tuple:
    """What a folder holds, cheaply: its files' names, sizes and modification times."""
    return tuple(sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()))


def _lacks_data(root: Path) -> bool:
    """A LeRobot folder without its metadata or data files (what LeRobot would download into ``root``); a store
    the drop-in recorded lacks nothing."""
    from lerobot_zarr.integrations.lerobot_meta import is_store

    if is_store(root):
        return False
    return not (root / "meta" / "info.json").is_file() or not any((root / "data").glob("*/*.parquet"))
