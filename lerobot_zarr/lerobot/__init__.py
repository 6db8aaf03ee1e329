"""The LeRobot format: its constants, paths and statistics (:mod:`.format`, v3.0 and v2.1), where a source's files
come from (:mod:`.source_files`), the source reader (:mod:`.source`), the writers of LeRobot's files
(:mod:`.writers`) and our index file of a pushed dataset (:mod:`.index_file`)."""

from .format import CAMERA_DTYPES, DEFAULT_FEATURES, NUMERIC_DTYPES
from .index_file import INDEX_FILE, HubIndex, read_index, write_index
from .source_files import LocalFiles, SourceFiles, is_lerobot_folder

__all__ = ["CAMERA_DTYPES", "DEFAULT_FEATURES", "NUMERIC_DTYPES", "INDEX_FILE", "HubIndex", "read_index",
           "write_index", "SourceEpisodes", "FeatureSpec", "LeRobotSource", "LocalFiles", "SourceFiles",
           "is_lerobot_folder"]

_SOURCE_NAMES = ("FeatureSpec", "LeRobotSource", "SourceEpisodes")


def __getattr__(name: str) -> object:
    """The source reader's names, imported when first asked for: it needs pyarrow, which opening a store does not."""
    if name in _SOURCE_NAMES:
        from . import source

        return getattr(source, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
