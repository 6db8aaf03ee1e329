"""The LeRobot format: its constants, paths and statistics (:mod:`.format`, v3.0 and v2.1), where a source's files
come from (:mod:`.source_files`), the source reader (:mod:`.source`), the writers of LeRobot's files
(:mod:`.writers`) and our index file of a pushed dataset (:mod:`.index_file`)."""

from ..utils.lazy import lazy_face

__all__ = ["CAMERA_DTYPES", "DEFAULT_FEATURES", "NUMERIC_DTYPES", "INDEX_FILE", "HubIndex", "read_index",
           "write_index", "SourceEpisodes", "FeatureSpec", "LeRobotSource", "LocalFiles", "SourceFiles",
           "is_lerobot_folder"]

__getattr__, __dir__ = lazy_face(__name__, {
    "CAMERA_DTYPES": "format", "DEFAULT_FEATURES": "format", "NUMERIC_DTYPES": "format", "INDEX_FILE": "index_file",
    "HubIndex": "index_file", "read_index": "index_file", "write_index": "index_file", "SourceEpisodes": "source",
    "FeatureSpec": "source", "LeRobotSource": "source", "LocalFiles": "source_files", "SourceFiles": "source_files",
    "is_lerobot_folder": "source_files"
})
