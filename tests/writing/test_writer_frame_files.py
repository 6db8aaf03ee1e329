"""``add_episode(frame_files=...)``: a recorder's spill file becomes the episode's pack by a rename, not a copy.

The frames read back are compared with the arrays the test wrote into the file (not with the store's output); that
no copy was made is shown by the pack file being the same inode as the file handed over.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import lerobot_zarr as lz
import lerobot_zarr.writing.transaction as transaction_module
from lerobot_zarr.store.state import chunk_path, read_state

CAM = "observation.images.cam"
FEATURES = {"observation.state": {"dtype": "float32", "shape": [2], "names": None},
            CAM: {"dtype": "image", "shape": [16, 24, 3], "names": ["height", "width", "channels"]}}
FRAME_BYTES = 16 * 24 * 3


def _spill(root: Path, frames: np.ndarray, name: str = ".recording.tmp-x/0") -> tuple[Path, np.memmap]:
    path = root / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(frames.tobytes())
    return path, np.memmap(path, dtype=np.uint8, mode="r", shape=frames.shape)


def _episode(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"observation.state": rng.normal(size=(n, 2)).astype(np.float32),
            CAM: rng.integers(0, 256, size=(n, 16, 24, 3), dtype=np.uint8)}


def _pack_of(root: Path, e: int) -> tuple[int, int]:
    state = read_state(root)
    return int(state.table.chunk[e]), int(state.table.offset[e])


def _check(root: Path, episodes: list[dict[str, np.ndarray]]) -> None:
    """Every frame read back equals the test's arrays, and every episode its recorded content hash."""
    ds = lz.open_dataset(root)
    assert ds.num_episodes == len(episodes)
    items = [ds[i] for i in range(len(ds))]
    np.testing.assert_array_equal(np.stack([np.asarray(it[CAM]) for it in items]),
                                  np.concatenate([ep[CAM] for ep in episodes]))
    np.testing.assert_array_equal(np.stack([np.asarray(it["observation.state"]) for it in items]),
                                  np.concatenate([ep["observation.state"] for ep in episodes]))
    assert lz.verify(root, progress=False).ok


def test_a_spill_starting_a_new_pack_is_renamed_into_it(tmp_path):
    root = tmp_path / "ds"
    # packs of 4 frames: an episode of 6 starts a new pack of its own, one of 3 then another, one of 1 shares it
    store = lz.create(root, fps=10, features=FEATURES, pack_bytes=4 * FRAME_BYTES)
    episodes = []
    for n, seed in ((6, 0), (3, 1), (1, 2)):
        ep = _episode(n, seed)
        path, mapped = _spill(root, ep[CAM])
        inode = os.stat(path).st_ino
        packs_before = len(store.committed_state.packs)
        store.add_episode({**ep, CAM: mapped}, task="t", frame_files={CAM: path})
        episodes.append(ep)
        pack, offset = _pack_of(root, len(episodes) - 1)
        target = chunk_path(root, CAM, pack, 4)
        if pack == packs_before:  # a new pack: the file itself, renamed, sized to the pack's rows
            assert offset == 0 and not path.exists()
            assert os.stat(target).st_ino == inode
            assert os.path.getsize(target) == int(store.committed_state.packs.rows[pack]) * FRAME_BYTES
        else:  # rows of the open pack: copied, the file left as it was
            assert path.exists() and os.stat(target).st_ino != inode
            path.unlink()
    assert [_pack_of(root, e) for e in range(3)] == [(0, 0), (1, 0), (1, 3)]
    store.close()
    _check(root, episodes)


@pytest.mark.parametrize("given", ["copy", "offset", "other file", "converted"])
def test_frames_that_are_not_the_whole_file_are_copied(tmp_path, given):
    root = tmp_path / "ds"
    store = lz.create(root, fps=10, features=FEATURES, pack_bytes=4 * FRAME_BYTES)
    ep = _episode(5, 3)
    path, mapped = _spill(root, ep[CAM])
    frames = {"copy": np.array(mapped), "offset": None, "other file": _spill(root, ep[CAM], "other")[1],
              "converted": None}[given]
    if given == "offset":  # the file holds a frame more, before the episode's
        path.write_bytes(np.zeros(FRAME_BYTES, np.uint8).tobytes() + ep[CAM].tobytes())
        frames = np.memmap(path, dtype=np.uint8, mode="r", shape=ep[CAM].shape, offset=FRAME_BYTES)
    if given == "converted":  # float images in [0, 1]: the stored bytes are not the file's
        frames = np.memmap(path, dtype=np.uint8, mode="r", shape=ep[CAM].shape).astype(np.float32) / 255
    inode = os.stat(path).st_ino
    store.add_episode({**ep, CAM: frames}, task="t", frame_files={CAM: path})
    assert path.exists() and os.stat(chunk_path(root, CAM, 0, 4)).st_ino != inode
    store.close()
    _check(root, [ep])


def test_a_failed_commit_puts_the_file_back(tmp_path, monkeypatch):
    root = tmp_path / "ds"
    store = lz.create(root, fps=10, features=FEATURES, pack_bytes=4 * FRAME_BYTES)
    first = _episode(2, 4)
    store.add_episode(first, task="t")
    ep = _episode(6, 5)
    path, mapped = _spill(root, ep[CAM])
    inode = os.stat(path).st_ino

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device (test)")

    with monkeypatch.context() as m:
        m.setattr(transaction_module, "append_commit", fail)
        m.setattr(transaction_module, "commit", fail)
        with pytest.raises(OSError, match="test"):
            store.add_episode({**ep, CAM: mapped}, task="t", frame_files={CAM: path})
    assert path.exists() and os.stat(path).st_ino == inode
    np.testing.assert_array_equal(np.fromfile(path, np.uint8)[:ep[CAM].nbytes], ep[CAM].reshape(-1))
    # the same episode saved again (a retry) is committed from the same file
    mapped = np.memmap(path, dtype=np.uint8, mode="r", shape=ep[CAM].shape)
    store.add_episode({**ep, CAM: mapped}, task="t", frame_files={CAM: path})
    assert not path.exists()
    store.close()
    _check(root, [first, ep])


_KILLED_AFTER_THE_RENAME = """
import os, signal, sys
import numpy as np
import lerobot_zarr as lz
import lerobot_zarr.writing.transaction as tx
sys.path.insert(0, {tests!r})
from test_writer_frame_files import FEATURES, FRAME_BYTES, CAM, _episode, _spill
from pathlib import Path

root = Path({root!r})
store = lz.create(root, fps=10, features=FEATURES, pack_bytes=4 * FRAME_BYTES)
store.add_episode(_episode(6, 0), task="t")
ep = _episode(5, 1)
path, mapped = _spill(root, ep[CAM])
die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # after the rename, before the commit
tx.commit = tx.append_commit = die
store.add_episode({{**ep, CAM: mapped}}, task="t", frame_files={{CAM: path}})
"""


def test_a_writer_killed_between_the_rename_and_the_commit_leaves_nothing_served(tmp_path):
    """SIGKILL after the spill became pack 1's file, before the commit: readers see the committed episode only, the
    next writer removes the uncommitted pack, and the next episode takes pack 1 again, exact."""
    import subprocess
    import sys

    root = tmp_path / "ds"
    script = _KILLED_AFTER_THE_RENAME.format(tests=str(Path(__file__).parent), root=str(root))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=300, capture_output=True)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert os.path.exists(chunk_path(root, CAM, 1, 4))  # the renamed spill, listed by no commit
    first = _episode(6, 0)
    _check(root, [first])
    store = lz.WritableDataset(root)  # the next writer: the uncommitted pack is debris
    assert not os.path.exists(chunk_path(root, CAM, 1, 4))
    ep = _episode(5, 2)
    path, mapped = _spill(root, ep[CAM], ".recording.tmp-y/0")
    inode = os.stat(path).st_ino
    store.add_episode({**ep, CAM: mapped}, task="t", frame_files={CAM: path})
    assert _pack_of(root, 1) == (1, 0) and os.stat(chunk_path(root, CAM, 1, 4)).st_ino == inode
    store.close()
    _check(root, [first, ep])


def test_frame_hashes_given_are_the_episodes_content_hashes_and_only_for_frame_files(tmp_path):
    """``frame_hashes`` (a recorder's CRC-32C of the bytes it wrote to its spill) are taken as the episode's
    content hashes: verify checks them against the frames (so a wrong one is reported); given for a feature that
    is not one of ``frame_files``, or with ``tail``, they are refused before anything is written."""
    from lerobot_zarr.errors import ArgumentError
    from lerobot_zarr.utils.hashing import crc32c

    root = tmp_path / "ds"
    store = lz.create(root, fps=10, features=FEATURES)
    episode = _episode(5, 0)
    path, frames = _spill(root, episode[CAM])
    with pytest.raises(ArgumentError, match="frame_hashes"):
        store.add_episode({**episode, CAM: frames}, task="t", frame_hashes={CAM: 1})  # no frame_files
    with pytest.raises(ArgumentError, match="frame_hashes"):
        store.add_episode({**episode, CAM: frames}, task="t", frame_files={CAM: path},
                          frame_hashes={"observation.state": 1})
    assert store.meta.total_episodes == 0
    store.add_episode({**episode, CAM: frames}, task="t", frame_files={CAM: path},
                      frame_hashes={CAM: crc32c(episode[CAM])})
    path, frames = _spill(root, _episode(4, 1)[CAM], name=".recording.tmp-x/1")
    store.add_episode({**_episode(4, 1), CAM: frames}, task="t", frame_files={CAM: path},
                      frame_hashes={CAM: crc32c(episode[CAM])})  # not these frames' hash
    store.close()
    report = lz.verify(root, progress=False)
    assert not report.ok and f"{CAM!r} in 1 episode(s) [1]:" in str(report), str(report)  # episode 0 sound
