"""``write_in_place``: how a commit writes zarr's copies and the episode stats cache without renaming files."""

from __future__ import annotations

import json
import os

import pytest

from lerobot_zarr.errors import CorruptStoreError
from lerobot_zarr.utils.fileio import write_in_place


def test_overwrites_in_place_pads_json_and_truncates_the_rest(tmp_path):
    path = tmp_path / "a" / "zarr.json"
    write_in_place(path, b'{"shape":[100]}', root=tmp_path)  # made, with its folder
    inode = path.stat().st_ino
    write_in_place(path, b'{"shape":[9]}', root=tmp_path, pad=True)
    assert path.read_bytes() == b'{"shape":[9]}  ' and json.loads(path.read_bytes()) == {"shape": [9]}
    write_in_place(path, b"\1\2", root=tmp_path)
    assert path.read_bytes() == b"\1\2" and path.stat().st_ino == inode, "the same file, no rename"
    mtime = path.stat().st_mtime_ns
    write_in_place(path, b"\1\2", root=tmp_path, unless_equal=True)
    assert path.stat().st_mtime_ns == mtime, "equal content is not written"


def test_a_file_shared_by_hard_links_is_replaced_not_changed_under_the_other_name(tmp_path):
    other = tmp_path / "other_store_file"
    other.write_bytes(b"the other store's")
    os.link(other, tmp_path / "copy")
    write_in_place(tmp_path / "copy", b"new", root=tmp_path)
    assert other.read_bytes() == b"the other store's" and (tmp_path / "copy").read_bytes() == b"new"


def test_links_are_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "folder").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CorruptStoreError):
        write_in_place(tmp_path / "store" / "folder" / "zarr.json", b"{}", root=tmp_path / "store")
    (tmp_path / "target").write_bytes(b"x")
    (tmp_path / "store" / "zarr.json").symlink_to(tmp_path / "target")
    with pytest.raises(CorruptStoreError):
        write_in_place(tmp_path / "store" / "zarr.json", b"{}", root=tmp_path / "store")
    assert (tmp_path / "target").read_bytes() == b"x" and not list((tmp_path / "elsewhere").iterdir())
