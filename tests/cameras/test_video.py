"""Cameras kept as mp4 (LeRobot ``video`` features): decoded into the store with PyAV, kept raw or compact, exported
back to AV1 mp4 files, read from the Hub by range requests.

Every stored camera frame is compared with a reference decoded here, independently of lerobot_zarr: the whole
mp4 decoded with PyAV (``rgb24``), then, for each dataset timestamp (read with pyarrow from the episode's data
parquet) plus the episode's ``from_timestamp`` (read with pyarrow / json from the metadata), the frame whose
``frame.time`` is nearest (it must lie within LeRobot's 1e-4 s). Same decoder, same conversion: equal bit for bit.

Real datasets come from ../shared/datasets (read only: copied to a temporary folder before anything changes them)
and are skipped when absent. Generated videos are small (48x64 or 96x128) except where a size matters (the Hub
byte counts).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

av = pytest.importorskip("av", reason="PyAV (lerobot_zarr[video]) is not installed: videos cannot be decoded")

from hub_fixtures import assert_same_frames, lib_requests, resolve_prefix, server_env

import lerobot_zarr  # noqa: F401  (enables zarr's rectilinear chunk grids before zarr is used)
import lerobot_zarr.hub.http as hub_http
import lerobot_zarr.writing.transcode as transcode_module
from lerobot_zarr import (
    HubError,
    LeRobotZarrDataset,
    NotMaterializedError,
    ReadOnlyStoreError,
    SourceMismatchError,
    open_dataset,
)
from lerobot_zarr.lerobot.source import LeRobotSource
from lerobot_zarr.sampling.streams import stream
from lerobot_zarr.store import WriterLock, read_state
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import camera_frames, write_sample_dataset

DATASETS_DIR = (Path(__file__).parents[2] / ".." / "shared" / "datasets").resolve()
TOLERANCE_S = 1e-4
FRONT, WRIST, PNG = "observation.images.front", "observation.images.wrist", "observation.images.png"
CAMS = (FRONT, WRIST)
SMALL = (48, 64, 3)
TOKEN = "hf_write"


# ------------------------------------------------------------------------------------------------ reference


def real(name: str) -> Path:
    path = DATASETS_DIR / name
    if not (path / "meta" / "info.json").is_file():
        pytest.skip(f"real LeRobot dataset {name!r} not found at {path} (../shared/datasets); skipping")
    return path


def decode_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every frame of an mp4 with PyAV: (frame.time of each, rgb24 frames (N, H, W, 3)). The frames are moved one
    by one into the array returned (a real episode's frames take hundreds of MB: never held twice)."""
    times, frames = [], []
    with av.open(str(path)) as container:
        for frame in container.decode(container.streams.video[0]):
            times.append(float(frame.time))
            frames.append(frame.to_ndarray(format="rgb24"))
    out = np.empty((len(frames), *frames[0].shape), dtype=frames[0].dtype)
    for i in range(len(frames)):
        out[i], frames[i] = frames[i], None
    return np.asarray(times), out


class Reference:
    """Where a LeRobot folder keeps each episode's frames and video, read with json and pyarrow only, and the
    frames a camera should give, decoded with PyAV (one mp4 cached at a time)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.info = json.loads((self.root / "meta" / "info.json").read_text())
        self.v3 = str(self.info["codebase_version"]).startswith("v3")
        self.fps = float(self.info["fps"])
        if self.v3:
            tables = [pq.read_table(p) for p in sorted((self.root / "meta" / "episodes").glob("*/*.parquet"))]
            rows = pa.concat_tables(tables, promote_options="permissive").to_pylist()
            self.episodes = {r["episode_index"]: r for r in rows}
        else:
            lines = (self.root / "meta" / "episodes.jsonl").read_text().splitlines()
            self.episodes = {r["episode_index"]: r for r in map(json.loads, filter(None, lines))}
        self._decoded: tuple[Path, np.ndarray, np.ndarray] | None = None

    def length(self, e: int) -> int:
        return int(self.episodes[e]["length"])

    def data_file(self, e: int) -> Path:
        if self.v3:
            row = self.episodes[e]
            rel = self.info["data_path"].format(chunk_index=row["data/chunk_index"], file_index=row["data/file_index"])
        else:
            rel = self.info["data_path"].format(episode_chunk=e // self.info["chunks_size"], episode_index=e)
        return self.root / rel

    def column(self, e: int, name: str) -> np.ndarray:
        """The episode's values of a scalar or vector column, from its data parquet."""
        table = pq.read_table(self.data_file(e), columns=["episode_index", name])
        rows = np.flatnonzero(table.column("episode_index").to_numpy() == e)
        values = table.column(name).to_pylist()
        return np.asarray([values[i] for i in rows])

    def timestamps(self, e: int) -> np.ndarray:
        table = pq.read_table(self.data_file(e), columns=["episode_index", "timestamp"])
        mask = table.column("episode_index").to_numpy() == e
        return table.column("timestamp").to_numpy()[mask].astype(np.float64)

    def video(self, key: str, e: int) -> tuple[Path, float]:
        if self.v3:
            row = self.episodes[e]
            rel = self.info["video_path"].format(video_key=key, chunk_index=row[f"videos/{key}/chunk_index"],
                                                 file_index=row[f"videos/{key}/file_index"])  # fmt: skip
            return self.root / rel, float(row[f"videos/{key}/from_timestamp"])
        rel = self.info["video_path"].format(episode_chunk=e // self.info["chunks_size"], video_key=key,
                                             episode_index=e)  # fmt: skip
        return self.root / rel, 0.0

    def frames(self, key: str, e: int) -> np.ndarray:
        """The camera frames of episode ``e``: for each dataset timestamp, the decoded frame nearest to it."""
        path, start = self.video(key, e)
        if self._decoded is None or self._decoded[0] != path:
            self._decoded = None  # free the previous file's frames first
            self._decoded = (path, *decode_file(path))
        _, times, frames = self._decoded
        queries = start + self.timestamps(e)
        nearest = np.abs(times[None, :] - queries[:, None]).argmin(axis=1)
        gap = np.abs(times[nearest] - queries)
        assert (gap < TOLERANCE_S).all(), (f"reference: {path} has no frame within {TOLERANCE_S} s of "
                                           f"{queries[gap >= TOLERANCE_S][:3]} (episode {e})")  # fmt: skip
        if len(nearest) and (np.diff(nearest) == 1).all():  # consecutive frames (the usual case): a view, no copy
            return frames[nearest[0]:nearest[-1] + 1]
        return frames[nearest]

    def forget(self) -> None:
        self._decoded = None


def assert_frames_equal(got, want: np.ndarray, what: str) -> None:
    got = np.asarray(got)
    assert got.dtype == np.uint8 and got.shape == want.shape, f"{what}: {got.dtype}{got.shape} != uint8{want.shape}"
    # in runs of frames: comparing a 480x640 episode at once makes another episode-sized array (the test budget)
    if not all(np.array_equal(got[i:i + 16], want[i:i + 16]) for i in range(0, len(want), 16)):
        bad = np.flatnonzero([not np.array_equal(g, w) for g, w in zip(got, want, strict=True)])
        diff = np.abs(got[bad[0]].astype(int) - want[bad[0]].astype(int))
        raise AssertionError(f"{what}: {len(bad)} of {len(want)} frames differ from the reference decode, first "
                             f"frame {int(bad[0])} (max abs diff {diff.max()}, {np.count_nonzero(diff)} values)")


def assert_store_matches_reference(ds: LeRobotZarrDataset, ref: Reference, keys, episodes, what: str) -> None:
    for e in episodes:
        stored = ds.episode(e)
        for key in keys:
            assert_frames_equal(stored[key], ref.frames(key, e), f"{what}: episode {e} {key}")
    ref.forget()


def open_quiet(*args, **kwargs) -> LeRobotZarrDataset:
    """open_dataset that must not warn (no camera left out)."""
    kwargs.setdefault("progress", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return open_dataset(*args, **kwargs)


def open_left_out(*args, cameras, **kwargs) -> LeRobotZarrDataset:
    """open_dataset that must warn that each of ``cameras`` is left out of samples."""
    kwargs.setdefault("progress", False)
    with pytest.warns(UserWarning, match="left out of samples") as record:
        ds = open_dataset(*args, **kwargs)
    warned = " ".join(str(w.message) for w in record)
    for key in cameras:
        assert repr(key) in warned, f"no warning names {key!r}: {warned}"
    return ds


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in Path(folder).rglob("*") if p.is_file()}


def chunk_bytes(store: Path, name: str) -> int:
    return sum(p.stat().st_size for p in (Path(store) / name / "c").rglob("*") if p.is_file())


def assert_close_to_encoded(stored, original: np.ndarray, what: str) -> None:
    """AV1 is lossy: the mean abs diff to the frames that were encoded stays under 8 (about 6 at 48x64: the
    generated gradient wraps around at 256, a sharp edge that yuv420p blurs), where a frame off by one in time
    gives about 12 and another camera about 55."""
    diff = np.abs(np.asarray(stored).astype(np.int16) - original)
    assert diff.mean() < 8 and np.median(diff) <= 4, f"{what}: mean abs diff {diff.mean():.2f} to the encoded frames"


# ------------------------------------------------------------------------------------------------ datasets


@pytest.fixture(scope="module")
def gen(tmp_path_factory) -> Path:
    """v3.0: 7 episodes, two cameras as AV1 mp4 (3 episodes per file: 3 files each), a PNG image feature."""
    return write_sample_dataset(tmp_path_factory.mktemp("gen") / "src", n_episodes=7, lengths=(8, 20),
                                image_shape=SMALL, video_keys=CAMS, image_keys=(PNG,), write_videos=True,
                                episodes_per_file=3, seed=21)  # fmt: skip


@pytest.fixture(scope="module")
def gen_raw(gen, tmp_path_factory) -> LeRobotZarrDataset:
    return open_quiet(gen, root=tmp_path_factory.mktemp("gen_raw") / "store")


# ------------------------------------------------------------------------------------------------ 1. real AV1


def test_g1_real_av1_videos_of_some_episodes(tmp_path):
    """G1-policy-train (v2.1, AV1 480x640): mp4 files exist for episodes 1, 2, 4 and 5 only. Its first four
    episodes: two without their mp4 (0 and 3), two with (each mp4 decoded at full size, twice: 4 and 5 would only
    repeat that)."""
    src = real("G1-policy-train")
    cam = "observation.images.cam_high"
    ref = Reference(src)
    store = tmp_path / "store"
    ds = open_left_out(src, root=store, episodes=range(4), cameras=[cam])

    unavailable = ds.meta.unavailable
    assert set(unavailable) == {cam} and sorted(unavailable[cam]) == [0, 3], unavailable
    for e in (0, 3):
        missing = f"videos/chunk-000/{cam}/episode_{e:06d}.mp4"
        assert missing in unavailable[cam][e] and "not found" in unavailable[cam][e], unavailable[cam][e]
        assert f"episode {e}" in unavailable[cam][e]
    assert cam in ds.left_out and "2 of the 4 selected episodes [0, 3]" in ds.left_out[cam], ds.left_out
    assert ds.meta.not_materialized == {}
    assert cam in ds.meta.stored_features and cam in ds.meta.features
    assert ds.meta.materialized_episodes[:4].all() and not ds.meta.materialized_episodes[4:].any()

    # state and action of all four episodes sample, bit exact; the camera is not in the samples
    batch = ds.get_batch(np.arange(len(ds)))
    assert cam not in batch and cam not in ds[0] and cam not in ds.episode(0)
    for key in ("observation.state", "action"):
        want = np.concatenate([ref.column(e, key) for e in range(4)]).astype(np.float32)
        assert np.array_equal(batch[key], want), key
    with pytest.raises(NotMaterializedError, match=cam):
        open_dataset(store, episodes=[2, 3], delta_timestamps={cam: [0.0]}, progress=False)

    # selecting only episodes with a video gives the camera; its frames are PyAV's, exactly
    chosen = [1, 2]
    ds = open_quiet(store, episodes=chosen)
    assert ds.left_out == {} and cam in ds.array_specs and ds.array_specs[cam].kind == "video"
    assert_store_matches_reference(ds, ref, [cam], chosen, "G1")

    # samples and windows: ds[i], get_batch and delta_timestamps with padding at the episode's edges
    window = [-2 / 30, 0.0, 1 / 30]
    win = open_quiet(store, episodes=chosen, delta_timestamps={cam: window})
    frames = ref.frames(cam, 2)
    first = win.episode_frames(2)[0]
    n = len(frames)
    for local in (0, n // 2, n - 1):
        item = win[first + local]
        assert_frames_equal(ds[first + local][cam], frames[local], f"G1 ds[{first + local}]")
        rows = np.clip(local + np.array([-2, 0, 1]), 0, n - 1)
        assert_frames_equal(item[cam], frames[rows], f"G1 window at frame {local} of episode 2")
        assert item[f"{cam}_is_pad"].tolist() == [local - 2 < 0, False, local + 1 >= n]
    picks = np.array([first, first + 5, first + n - 1])
    got = win.get_batch(picks)
    assert got[cam].shape == (3, 3, 480, 640, 3)
    for k, local in enumerate([0, 5, n - 1]):
        assert_frames_equal(got[cam][k], frames[np.clip(local + np.array([-2, 0, 1]), 0, n - 1)], "G1 get_batch")


# ------------------------------------------------------------------------------------------------ 2. real h264


def test_open_50_video_at_a_path_other_than_the_template(tmp_path):
    """open_50 keeps its one video at video/image/... instead of info.json's videos/image/...: reported
    unavailable (naming where it was looked for); once moved where the template says, decoded exactly."""
    src = real("open_50")
    as_is = tmp_path / "as_is"
    shutil.copytree(src, as_is)
    ds = open_left_out(as_is, root=tmp_path / "store_as_is", episodes=[0], cameras=["image"])
    reason = ds.meta.unavailable["image"][0]
    assert str(as_is / "videos/image/chunk-000/file-000.mp4") in reason and "not found" in reason, reason
    assert "image" in ds.left_out and "image" not in ds[0]

    moved = tmp_path / "moved"
    shutil.copytree(src, moved)
    (moved / "video").rename(moved / "videos")
    ds = open_quiet(moved, root=tmp_path / "store_moved", episodes=[0])
    assert ds.meta.unavailable == {} and ds.left_out == {}
    ref = Reference(moved)
    assert_store_matches_reference(ds, ref, ["image"], [0], "open_50")
    assert ds[0]["image"].shape == (480, 640, 3)
    # the file holds episode 0 only: episode 1 (file-001.mp4) is unavailable, episode 0 still has the camera
    both = open_left_out(moved, root=tmp_path / "store_moved", episodes=[0, 1], cameras=["image"])
    assert sorted(both.meta.unavailable["image"]) == [1]
    assert "file-001.mp4" in both.meta.unavailable["image"][1]


# ------------------------------------------------------------------------------------------------ 3. generated


def test_generated_v3_two_cameras_several_files(gen, gen_raw):
    ref = Reference(gen)
    files = {p.relative_to(gen).as_posix() for p in (gen / "videos").rglob("*.mp4")}
    assert files == {f"videos/{k}/chunk-000/file-00{i}.mp4" for k in CAMS for i in range(3)}, files
    ds = gen_raw
    assert ds.meta.unavailable == {} and ds.left_out == {}
    specs = ds.array_specs
    assert all(specs[k].kind == "video" and specs[k].frame_shape == SMALL and specs[k].storage == "raw" for k in CAMS)
    assert_store_matches_reference(ds, ref, CAMS, range(7), "generated v3.0")
    # AV1 is lossy: close to the frames that were encoded
    for e in range(7):
        stored = ds.episode(e)
        for number, key in enumerate(CAMS):
            assert_close_to_encoded(stored[key], camera_frames(number, e, ref.length(e), SMALL, 21), f"{e} {key}")
    # samples carry the cameras; float32_chw converts them like images
    item = ds[len(ds) - 1]
    assert_frames_equal(item[FRONT], ref.frames(FRONT, 6)[-1], "last frame")
    chw = LeRobotZarrDataset(ds.root, image_format="float32_chw")[len(ds) - 1]
    assert chw[FRONT].dtype == np.float32 and chw[FRONT].shape == (3, 48, 64)
    assert np.array_equal(chw[FRONT], np.moveaxis(item[FRONT], -1, 0).astype(np.float32) / np.float32(255))


def test_generated_v21_one_video_per_episode(tmp_path):
    src = write_sample_dataset(tmp_path / "src", version="v2.1", n_episodes=4, lengths=(8, 20), image_shape=SMALL,
                               video_keys=CAMS, write_videos=True, seed=22)  # fmt: skip
    assert len(list((src / "videos").rglob("*.mp4"))) == 8
    ref = Reference(src)
    ds = open_quiet(src, root=tmp_path / "store")
    assert ds.meta.unavailable == {}
    assert_store_matches_reference(ds, ref, CAMS, range(4), "generated v2.1")
    for e in range(4):
        assert_close_to_encoded(ds.episode(e)[WRIST], camera_frames(1, e, ref.length(e), SMALL, 22), f"v2.1 {e}")


# ------------------------------------------------------------------------------------------------ 4. Hub


HUB_SHAPE = (120, 160, 3)


def noisy_frames(e: int, n: int, shape) -> np.ndarray:
    """A moving gradient under heavy noise: about 9 kB per AV1 frame at 120x160 (camera_frames' light noise
    needs 240x320 frames, four times the encoding time, for as many bytes)."""
    h, w, _ = shape
    y, x = np.mgrid[0:h, 0:w]
    base = ((x * 3 + y * 2)[..., None] + np.arange(3) * 40 + e * 17).astype(np.uint8)
    moving = base[None] + (np.arange(n) * 5).astype(np.uint8)[:, None, None, None]
    return moving + np.random.default_rng([23, e]).integers(0, 64, size=(n, h, w, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def hub(module_tmp):
    """A test Hub serving a generated v3.0 dataset whose one mp4 (LeRobot's AV1 encoding, written with
    lerobot_zarr.cameras.video.VideoWriter like write_sample_dataset does) holds 40 episodes, about 13 MB."""
    from lerobot_zarr.cameras.video import VideoWriter

    base = module_tmp / "video_hub"
    big = write_sample_dataset(base / "big", n_episodes=40, lengths=(30, 45), image_shape=HUB_SHAPE,
                               video_keys=(FRONT,), seed=23)  # fmt: skip
    ref = Reference(big)
    mp4, _ = ref.video(FRONT, 0)
    mp4.parent.mkdir(parents=True)
    writer = VideoWriter(mp4, ref.fps, HUB_SHAPE[1], HUB_SHAPE[0])
    for e in range(40):
        start, _ = writer.add(noisy_frames(e, ref.length(e), HUB_SHAPE))
        assert ref.video(FRONT, e) == (mp4, pytest.approx(start, abs=1e-9))
    writer.close()
    server = HubServer(base / "storage", tokens={TOKEN: "alice"})
    sha = server.add_repo("org/big", big, tags=["v3.0"])
    with server:
        yield {"server": server, "big": big, "sha": sha}
    assert server.errors == [], server.errors[0]


@pytest.fixture
def env(monkeypatch, tmp_path, hub):
    yield from server_env(monkeypatch, tmp_path, hub["server"])


def _video_bytes(server, sha: str, repo_id: str = "org/big") -> int:
    return server.bytes_sent(resolve_prefix(repo_id, sha) + "videos/")


def test_hub_one_episode_reads_a_small_part_of_the_mp4(hub, env, tmp_path, capsys):
    server, big, sha = hub["server"], hub["big"], hub["sha"]
    mp4 = big / "videos" / FRONT / "chunk-000" / "file-000.mp4"
    size = mp4.stat().st_size
    assert size > 8 * 2**20, f"the test needs an mp4 of several MB, got {size} B"
    local = open_quiet(big, root=tmp_path / "local")
    k = 21  # in the middle of the file
    ds = open_quiet("org/big", episodes=[k])
    one = _video_bytes(server, sha)
    with capsys.disabled():
        print(f"\n[bytes] one episode of 40 from the Hub: {one} B of the {size} B mp4 ({100 * one / size:.1f}%)")
    assert 0 < one < 0.15 * size, f"{one} B read from a {size} B mp4 for one episode of 40"
    gets = lib_requests(server, "GET", "/videos/")
    assert gets and all(r.range is not None and r.status == 206 for r in gets), [(r.range, r.status) for r in gets]
    assert_same_frames(ds, LeRobotZarrDataset(local.root, episodes=[k]), "one episode from the Hub")

    server.reset_stats()
    whole = open_quiet("org/big", root=tmp_path / "whole")
    total = _video_bytes(server, sha)
    with capsys.disabled():
        print(f"[bytes] whole dataset from the Hub: {total} B for a {size} B mp4 ({total / size:.2f}x)")
    assert size <= total < 1.5 * size, f"{total} B read for a {size} B mp4"
    assert_same_frames(whole, local, "whole dataset from the Hub")
    assert whole.meta.unavailable == {}


def test_hub_server_errors_on_a_video_are_raised_not_recorded(hub, env, tmp_path, monkeypatch):
    """A network failure is not a broken video: the open fails, nothing is recorded unavailable, and the next
    open (server recovered) gets the frames."""
    server, big, sha = hub["server"], hub["big"], hub["sha"]
    monkeypatch.setattr(hub_http, "_BACKOFF_S", 0.01, raising=False)
    server.inject_fault(path_contains=resolve_prefix("org/big", sha) + "videos/", kind="500", count=1000)
    with pytest.raises(HubError):
        open_dataset("org/big", episodes=[3], progress=False)
    state = read_state(Path(env.zarr_home) / "hub" / "org--big" / sha)  # made before the frames were fetched
    assert state.unavailable_of(FRONT) == {}, state.unavailable_of(FRONT)
    assert not state.complete_episodes()[3]
    server.clear_faults()
    ds = open_quiet("org/big", episodes=[3])
    assert ds.meta.unavailable == {}
    assert_same_frames(ds, open_quiet(big, root=tmp_path / "local", episodes=[3]), "after the server recovered")


# ------------------------------------------------------------------------------------------------ 5. broken


def _rewrite_from_timestamp(src: Path, key: str, episode: int, shift: float) -> None:
    path = src / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(path)
    name = f"videos/{key}/from_timestamp"
    values = table.column(name).to_pylist()
    values[episode] += shift
    i = table.schema.get_field_index(name)
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type)), path)


def test_broken_videos_make_only_their_episodes_unavailable(tmp_path):
    # 8 episodes, 2 per mp4: file 0 (episodes 0, 1), file 1 (2, 3), file 2 (4, 5), file 3 (6, 7)
    src = write_sample_dataset(tmp_path / "src", n_episodes=8, lengths=(8, 16), image_shape=SMALL,
                               video_keys=(FRONT,), write_videos=True, episodes_per_file=2, seed=24)  # fmt: skip
    ref = Reference(src)
    videos = src / "videos" / FRONT / "chunk-000"
    (videos / "file-001.mp4").write_bytes(np.random.default_rng(0).bytes(6000))  # garbage
    data = (videos / "file-002.mp4").read_bytes()
    (videos / "file-002.mp4").write_bytes(data[: len(data) // 2])  # truncated
    half = 0.5 / ref.fps
    _rewrite_from_timestamp(src, FRONT, 1, half)  # episode 1 falls between frames
    first_query = ref.video(FRONT, 1)[1] + half  # its first dataset timestamp is 0

    ds = open_left_out(src, root=tmp_path / "store", cameras=[FRONT])
    reasons = ds.meta.unavailable[FRONT]
    assert sorted(reasons) == [1, 2, 3, 4, 5], reasons
    for e in (2, 3, 4, 5):
        assert "cannot decode" in reasons[e] and f"file-00{e // 2}.mp4" in reasons[e], reasons[e]
        assert f"episode {e}" in reasons[e] and repr(FRONT) in reasons[e]
    shifted = reasons[1]
    assert "episode 1" in shifted and repr(FRONT) in shifted and f"{first_query:.6f}" in shifted, shifted

    # everything else is there, bit exact
    batch = ds.get_batch(np.arange(len(ds)))
    want = np.concatenate([ref.column(e, "action") for e in range(8)]).astype(np.float32)
    assert np.array_equal(batch["action"], want) and FRONT not in batch
    good = open_quiet(ds.root, episodes=[0, 6, 7])
    assert_store_matches_reference(good, ref, [FRONT], [0, 6, 7], "intact episodes")

    # the store format: committed chunks and unavailable runs of the camera; zarr reads the committed episodes
    attrs = json.loads((ds.root / "zarr.json").read_text())["attributes"]["lerobot_zarr"]
    assert attrs["features"][FRONT]["kind"] == "video" and attrs["features"][FRONT]["episodes"] == [[0, 1], [6, 8]]
    runs = attrs["unavailable"][FRONT]
    assert [e for a, b, _ in runs for e in range(a, b)] == [1, 2, 3, 4, 5] and runs[0][2] == shifted
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.open_group(ds.root, mode="r")[FRONT]
    a, b = int(ds.meta.episode_start[6]), int(ds.meta.episode_end[7])
    want = np.concatenate([good.episode(6)[FRONT], good.episode(7)[FRONT]])
    assert np.array_equal(array[a:b], want)


def test_empty_mp4_makes_its_episode_unavailable(tmp_path):
    """A 0-byte mp4 (PyAV's probe seeks before its start: OSError EINVAL) is a video that cannot be decoded."""
    src = write_sample_dataset(tmp_path / "src", n_episodes=3, lengths=(8, 12), image_shape=SMALL,
                               video_keys=(FRONT,), write_videos=True, episodes_per_file=1, seed=25)  # fmt: skip
    (src / "videos" / FRONT / "chunk-000" / "file-001.mp4").write_bytes(b"")
    ds = open_left_out(src, root=tmp_path / "store", cameras=[FRONT])
    assert sorted(ds.meta.unavailable[FRONT]) == [1]
    reason = ds.meta.unavailable[FRONT][1]
    assert "cannot decode" in reason and "file-001.mp4" in reason and "episode 1" in reason, reason
    good = open_quiet(ds.root, episodes=[0, 2])
    assert_store_matches_reference(good, Reference(src), [FRONT], [0, 2], "episodes next to the empty mp4")


def test_exception_mid_decode_keeps_the_last_commit_and_resumes(gen, gen_raw, tmp_path, monkeypatch):
    store = tmp_path / "store"
    monkeypatch.setattr(transcode_module, "_COMMIT_EVERY_S", 0.0)
    monkeypatch.setattr(transcode_module, "_HOLD_S", 0.0)  # every commit writes all it has: one per episode
    original = LeRobotSource.decode_video

    def failing(self, episode, key, timestamps, sink, **kwargs):
        if episode == 4:
            raise RuntimeError("disk on fire while decoding episode 4")
        return original(self, episode, key, timestamps, sink, **kwargs)

    monkeypatch.setattr(LeRobotSource, "decode_video", failing)
    with pytest.raises(RuntimeError, match="episode 4"):
        open_dataset(gen, root=store, progress=False)
    state = read_state(store)
    assert np.flatnonzero(state.complete_episodes()).tolist() == [0, 1, 2, 3]
    assert all(state.unavailable_of(k) == {} for k in CAMS), "an exception was recorded as a broken video"
    partial = open_quiet(store)
    assert partial.episodes.tolist() == [0, 1, 2, 3]
    assert_store_matches_reference(partial, Reference(gen), CAMS, [0, 1, 2, 3], "committed before the failure")

    monkeypatch.setattr(LeRobotSource, "decode_video", original)
    resumed = open_quiet(gen, root=store)
    assert resumed.episodes.tolist() == list(range(7))
    assert_same_frames(resumed, gen_raw, "resumed vs uninterrupted transcode")


# ------------------------------------------------------------------------------------------------ 6. compact


@pytest.fixture(scope="module")
def gen_compact(gen, tmp_path_factory) -> LeRobotZarrDataset:
    return open_quiet(gen, root=tmp_path_factory.mktemp("gen_compact") / "store",
                      storage={FRONT: "compact", PNG: "compact"})  # wrist stays raw


def test_compact_storage_reads_like_raw(gen_raw, gen_compact):
    raw, compact = gen_raw, gen_compact
    specs = compact.array_specs
    assert specs[FRONT].storage == specs[PNG].storage == "compact" and specs[WRIST].storage == "raw"
    assert_same_frames(compact, raw, "compact vs raw (get_batch of every frame)")
    for i in (0, 1, len(raw) // 2, len(raw) - 1):
        a, b = compact[i], raw[i]
        assert sorted(a) == sorted(b)
        for key in b:
            assert np.array_equal(a[key], b[key]) if key != "task" else a[key] == b[key], (i, key)
    for e in range(7):
        a, b = compact.episode(e), raw.episode(e)
        assert sorted(a) == sorted(b)
        for key in b:
            assert np.asarray(a[key]).tobytes() == np.asarray(b[key]).tobytes(), (e, key)
    # windows with padding, items and batches
    deltas = {FRONT: [-3 / 30, -1 / 30, 0.0, 2 / 30], PNG: [0.0, 1 / 30], "action": [-1 / 30, 0.0]}
    wc = LeRobotZarrDataset(compact.root, delta_timestamps=deltas)
    wr = LeRobotZarrDataset(raw.root, delta_timestamps=deltas)
    ends = np.cumsum(raw.meta.episode_length)
    picks = sorted({0, 1, 2, int(ends[0]) - 1, int(ends[0]), int(ends[3]) - 2, len(raw) - 1})
    for i in picks:
        a, b = wc[i], wr[i]
        assert sorted(a) == sorted(b) and f"{FRONT}_is_pad" in a
        for key in b:
            assert np.array_equal(a[key], b[key]) if key != "task" else a[key] == b[key], (i, key)
    assert wr[0][f"{FRONT}_is_pad"].tolist() == [True, True, False, False]
    assert_same_frames(wc, wr, "compact vs raw windows")
    bc, br = wc.get_batch(picks), wr.get_batch(picks)
    for key in br:
        assert np.array_equal(bc[key], br[key]) if key != "task" else bc[key] == br[key], key
    # float32_chw too
    fc = LeRobotZarrDataset(compact.root, image_format="float32_chw").get_batch([3, 40])
    fr = LeRobotZarrDataset(raw.root, image_format="float32_chw").get_batch([3, 40])
    assert fc[FRONT].shape == (2, 3, 48, 64) and np.array_equal(fc[FRONT], fr[FRONT])


def test_compact_storage_is_smaller_and_zarr_reads_it(gen_raw, gen_compact):
    raw_bytes, compact_bytes = chunk_bytes(gen_raw.root, FRONT), chunk_bytes(gen_compact.root, FRONT)
    assert compact_bytes < 0.85 * raw_bytes, (compact_bytes, raw_bytes)
    assert chunk_bytes(gen_compact.root, WRIST) == chunk_bytes(gen_raw.root, WRIST)
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gc, gr = zarr.open_group(gen_compact.root, mode="r"), zarr.open_group(gen_raw.root, mode="r")
    want = gen_raw.get_batch(np.arange(len(gen_raw)))
    starts, ends = gen_raw.meta.episode_start, gen_raw.meta.episode_end
    for key in (FRONT, PNG, WRIST):
        assert gc[key].shape == gr[key].shape == want[key].shape
        assert np.array_equal(gc[key][:], want[key]), key
        a, b = int(starts[2]) + 3, int(ends[4]) - 1  # across episodes
        assert np.array_equal(gc[key][a:b], want[key][a:b]) and np.array_equal(gr[key][a:b], want[key][a:b]), key
    codecs = json.loads((gen_compact.root / FRONT / "zarr.json").read_text())["codecs"]
    assert codecs[0]["name"] == "sharding_indexed", codecs
    assert codecs[0]["configuration"]["chunk_shape"] == [1, *SMALL]  # one frame per inner chunk
    root = json.loads((gen_compact.root / "zarr.json").read_text())["attributes"]["lerobot_zarr"]
    assert root["features"][FRONT]["storage"] == "compact" and root["features"][WRIST]["storage"] == "raw"
    assert root["features"][FRONT]["kind"] == "video" and root["features"][PNG]["kind"] == "image"


def test_storage_choice_is_checked(gen, gen_raw, gen_compact, tmp_path):
    with pytest.raises(SourceMismatchError, match=FRONT):
        open_dataset(gen, root=gen_compact.root, storage={FRONT: "raw"}, progress=False)
    with pytest.raises(SourceMismatchError, match=FRONT):
        open_dataset(gen, root=gen_raw.root, storage={FRONT: "compact"}, progress=False)
    open_quiet(gen, root=gen_compact.root, storage={FRONT: "compact"})  # the same choice is fine
    for bad in ({"action": "compact"}, {"observation.state": "raw"}, {FRONT: "zip"}, {"no.such.camera": "compact"}):
        with pytest.raises(ValueError):
            open_dataset(gen, root=tmp_path / "new", storage=bad, progress=False)
        assert not (tmp_path / "new" / "zarr.json").exists(), bad


# ------------------------------------------------------------------------------------------------ 7. export


@pytest.fixture(scope="module")
def exported(module_tmp):
    """A store of 2 cameras (18 episodes at 96x128, about 2 MB of AV1 per camera) exported with
    video_files_size_in_mb=1: several mp4 files per camera."""
    base = module_tmp / "export"
    src = write_sample_dataset(base / "src", n_episodes=18, lengths=(70, 90), image_shape=(96, 128, 3),
                               video_keys=CAMS, write_videos=True, episodes_per_file=5, seed=26)  # fmt: skip
    ds = open_quiet(src, root=base / "store")
    out = Path(ds.to_lerobot(base / "export", video_files_size_in_mb=1, progress=False))
    return ds, out


def test_export_writes_lerobot_videos(exported):
    ds, out = exported
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    for key in CAMS:
        ft = info["features"][key]
        assert ft["dtype"] == "video" and ft["shape"] == [96, 128, 3], ft
        vi = ft["info"]
        assert (vi["video.height"], vi["video.width"], vi["video.channels"]) == (96, 128, 3), vi
        assert vi["video.codec"] == "av1" and vi["video.pix_fmt"] == "yuv420p" and vi["video.fps"] == info["fps"]
    data = sorted(out.glob("data/*/*.parquet"))
    assert data and all(not set(CAMS) & set(pq.read_schema(p).names) for p in data), "cameras in the data files"
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    lengths = ds.meta.episode_length.tolist()
    fps = float(info["fps"])
    for key in CAMS:
        files: dict[tuple[int, int], list[int]] = {}
        for e, row in enumerate(episodes):
            start, stop = row[f"videos/{key}/from_timestamp"], row[f"videos/{key}/to_timestamp"]
            assert abs((stop - start) - lengths[e] / fps) < 1e-9, (key, e, start, stop)
            files.setdefault((row[f"videos/{key}/chunk_index"], row[f"videos/{key}/file_index"]), []).append(e)
        assert len(files) >= 2, f"{key}: one mp4 only with video_files_size_in_mb=1: {files}"
        on_disk = sorted(p.relative_to(out).as_posix() for p in (out / "videos" / key).rglob("*.mp4"))
        assert on_disk == [f"videos/{key}/chunk-{c:03d}/file-{f:03d}.mp4" for c, f in sorted(files)]
        for eps in files.values():  # episodes of a file are consecutive and follow each other in time
            assert eps == list(range(eps[0], eps[-1] + 1)), eps
            assert episodes[eps[0]][f"videos/{key}/from_timestamp"] == 0.0
            for a, b in itertools.pairwise(eps):
                assert episodes[b][f"videos/{key}/from_timestamp"] == episodes[a][f"videos/{key}/to_timestamp"]
        with av.open(str(out / on_disk[0])) as c:
            stream = c.streams.video[0]
            assert stream.codec_context.name in ("libdav1d", "av1", "libaom-av1") and stream.average_rate == fps


def test_export_read_back_equals_a_decode_of_the_exported_files(exported, tmp_path):
    ds, out = exported
    back = open_quiet(out, root=tmp_path / "back")
    assert back.meta.unavailable == {} and all(back.array_specs[k].kind == "video" for k in CAMS)
    ref = Reference(out)
    assert_store_matches_reference(back, ref, CAMS, range(18), "export read back")
    # lossy again, but close to the store's frames; every other feature bit exact
    a, b = back.get_batch(np.arange(len(back))), ds.get_batch(np.arange(len(ds)))
    for key in b:
        if key in CAMS:
            assert np.abs(a[key].astype(np.int16) - b[key]).mean() < 4, key
        elif key != "task":
            assert np.asarray(a[key]).tobytes() == np.asarray(b[key]).tobytes(), key


def test_export_as_images_is_exact_and_exports_are_deterministic(exported, gen_raw, tmp_path):
    images = Path(gen_raw.to_lerobot(tmp_path / "images", videos=False, progress=False))
    info = json.loads((images / "meta" / "info.json").read_text())
    assert all(info["features"][k]["dtype"] == "image" for k in (*CAMS, PNG)) and info["video_path"] is None
    assert not (images / "videos").exists()
    assert {*CAMS, PNG} <= set(pq.read_schema(next(images.glob("data/*/*.parquet"))).names)
    back = open_quiet(images, root=tmp_path / "images_store")
    assert all(back.array_specs[k].kind == "image" for k in CAMS)
    assert_same_frames(back, gen_raw, "image export read back")  # PNG: the store's frames exactly

    # with videos (one mp4 per camera at the default video_files_size_in_mb): the same bytes every time
    ds, _ = exported
    first, second = (_files(Path(ds.to_lerobot(tmp_path / f"again{i}", progress=False))) for i in range(2))
    assert sorted(first) == sorted(second) and any(rel.endswith(".mp4") for rel in first)
    assert [rel for rel in first if first[rel] != second[rel]] == [], "two exports of the same store differ"


def test_export_split_into_several_video_files_is_deterministic(exported, tmp_path):
    ds, out = exported
    want = _files(out)
    got = _files(Path(ds.to_lerobot(tmp_path / "again", video_files_size_in_mb=1, progress=False)))
    assert sorted(got) == sorted(want) and [rel for rel in want if want[rel] != got[rel]] == []


def test_export_of_image_features_as_videos(tmp_path):
    """videos=True makes every camera a video, PNG image features included; videos=False the reverse."""
    src = write_sample_dataset(tmp_path / "src", n_episodes=3, lengths=(40, 50), image_shape=SMALL,
                               image_keys=(PNG,), video_keys=(FRONT,), write_videos=True, seed=28)  # fmt: skip
    ds = open_quiet(src, root=tmp_path / "store")
    out = Path(ds.to_lerobot(tmp_path / "out", videos=True, progress=False))
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"][PNG]["dtype"] == info["features"][FRONT]["dtype"] == "video"
    assert (out / "videos" / PNG / "chunk-000" / "file-000.mp4").is_file()
    assert PNG not in pq.read_schema(next(out.glob("data/*/*.parquet"))).names
    back = open_quiet(out, root=tmp_path / "back")
    assert back.array_specs[PNG].kind == "video"
    assert_store_matches_reference(back, Reference(out), [PNG, FRONT], range(3), "videos=True export")
    for e in range(3):  # lossy (and the generated PNG frames are noisy), but closer to its frame than the next
        a, b = np.asarray(back.episode(e)[PNG]).astype(np.int16), np.asarray(ds.episode(e)[PNG]).astype(np.int16)
        own, shifted = np.abs(a - b).mean(), np.abs(a[:-1] - b[1:]).mean()
        assert own < 25 and own < 0.9 * shifted, (e, own, shifted)


def test_export_videos_of_short_episodes(tmp_path):
    src = write_sample_dataset(tmp_path / "src", n_episodes=3, lengths=[10, 12, 30], image_shape=SMALL,
                               video_keys=(FRONT,), write_videos=True, seed=29)  # fmt: skip
    ds = open_quiet(src, root=tmp_path / "store")
    out = Path(ds.to_lerobot(tmp_path / "out", progress=False))
    back = open_quiet(out, root=tmp_path / "back")
    assert_store_matches_reference(back, Reference(out), [FRONT], range(3), "short episodes")


def test_push_with_videos_then_open_from_the_hub(hub, env, exported, tmp_path):
    ds, _ = exported
    server = hub["server"]
    sha = ds.push("alice/cams", token=TOKEN, progress=False)
    files = server.list_files("alice/cams")
    assert {f"videos/{k}/chunk-000/file-000.mp4" for k in CAMS} <= set(files), files
    local = open_quiet(Path(ds.to_lerobot(tmp_path / "export", progress=False)), root=tmp_path / "local")
    whole = open_quiet("alice/cams", token=TOKEN, root=tmp_path / "hub")
    assert whole.meta.source["commit"] == sha
    assert_same_frames(whole, local, "pushed videos read back from the Hub")
    server.reset_stats()
    part = open_quiet("alice/cams", token=TOKEN, root=tmp_path / "hub_part", episodes=[7])
    assert_same_frames(part, LeRobotZarrDataset(local.root, episodes=[7]), "one episode of the pushed dataset")


# ------------------------------------------------------------------------------------------------ 8. LeRobot


def test_lerobot_loads_the_video_export(exported, tmp_path, capsys):
    pytest.importorskip("lerobot", reason="lerobot is not installed here: LeRobotDataset was not checked")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds, out = exported
    theirs = LeRobotDataset(repo_id="local/cams", root=out)
    ours = LeRobotZarrDataset(open_quiet(out, root=tmp_path / "back").root, image_format="float32_chw")
    assert len(theirs) == len(ours) and theirs.num_episodes == 18
    n = len(ours)
    ends = np.cumsum(ds.meta.episode_length)
    worst = 0.0
    for i in sorted({0, 1, int(ends[4]) - 1, int(ends[4]), n // 2, n - 1}):
        a, o = theirs[i], ours[i]
        assert int(a["index"]) == int(o["index"])
        assert np.array_equal(a["action"].numpy(), o["action"])
        for key in CAMS:
            x = a[key].numpy()
            assert x.dtype == np.float32 and x.shape == o[key].shape == (3, 96, 128), (key, x.shape)
            diff = np.abs(x - o[key])
            worst = max(worst, float(diff.max()))
            assert diff.mean() < 1 / 255 and diff.max() <= 0.1, (i, key, diff.mean(), diff.max())
    with capsys.disabled():
        print(f"\n[lerobot] LeRobotDataset (video backend {getattr(theirs, "_video_backend", "?")!r}) vs ours: max abs diff {worst}")


# ------------------------------------------------------------------------------------------------ 9. writers


def test_writable_dataset_refuses_compact_but_opens_unavailable_cameras(gen, gen_compact, tmp_path):
    with pytest.raises(ReadOnlyStoreError, match="compact"):
        open_dataset(gen_compact.root, mode="r+", progress=False)
    with WriterLock(gen_compact.root, blocking=False):  # the refusal released the writer lock
        pass

    missing = write_sample_dataset(tmp_path / "src", n_episodes=3, lengths=(8, 12), image_shape=SMALL,
                                   video_keys=(FRONT,), write_videos=True, episodes_per_file=1, seed=27)  # fmt: skip
    (missing / "videos" / FRONT / "chunk-000" / "file-002.mp4").unlink()
    store = open_left_out(missing, root=tmp_path / "store", cameras=[FRONT]).root
    with open_dataset(store, mode="r+", progress=False) as w:  # left out as above (said once per store and process)
        assert FRONT in w.left_out and list(w.meta.unavailable[FRONT]) == [2]
        with pytest.raises(NotMaterializedError, match=FRONT), w.edit(2, features=[FRONT]):
            pass
        w.delete_episodes([2])  # the camera is complete again
        assert w.left_out == {} and w.meta.unavailable == {} and FRONT in w[0]
    # a raw store with every camera available is writable
    with open_dataset(gen, root=tmp_path / "raw", mode="r+", progress=False) as writable:
        assert FRONT in writable.array_specs


# ------------------------------------------------------------------------------------------------ streaming


def _stream_items(source, **kwargs) -> dict[int, dict]:
    return {int(item["index"]): item for item in stream(source, shuffle=False, **kwargs)}


def test_stream_of_a_store_yields_the_cameras(gen_raw, gen_compact):
    for ds in (gen_raw, gen_compact):
        items = _stream_items(ds.root, delta_timestamps={FRONT: [-1 / 30, 0.0]})
        windowed = LeRobotZarrDataset(ds.root, delta_timestamps={FRONT: [-1 / 30, 0.0]})
        assert sorted(items) == list(range(len(ds)))
        for i in (0, 5, len(ds) - 1):
            want = windowed[i]
            assert sorted(items[i]) == sorted(want)
            assert np.array_equal(items[i][FRONT], want[FRONT]) and np.array_equal(items[i][WRIST], want[WRIST])
            assert items[i][f"{FRONT}_is_pad"].tolist() == want[f"{FRONT}_is_pad"].tolist()


def test_stream_of_a_store_converts_video_cameras_to_float32_chw(gen_raw):
    items = _stream_items(gen_raw.root, image_format="float32_chw")
    want = LeRobotZarrDataset(gen_raw.root, image_format="float32_chw")[3]
    assert items[3][PNG].shape == want[PNG].shape == (3, 48, 64)
    assert items[3][FRONT].dtype == np.float32 and items[3][FRONT].shape == want[FRONT].shape == (3, 48, 64)


def test_stream_of_a_folder_yields_the_cameras(gen, gen_raw):
    items = _stream_items(gen, delta_timestamps={FRONT: [0.0]})
    assert FRONT in items[0] and f"{FRONT}_is_pad" in items[0], sorted(items[0])
    assert np.array_equal(items[0][FRONT][0], gen_raw[0][FRONT])


# ------------------------------------------------------------------------------------------------ lazy, and a known gap


def test_lazy_dataset_touching_an_episode_without_video(tmp_path):
    src = write_sample_dataset(tmp_path / "src", n_episodes=3, lengths=(8, 12), image_shape=SMALL,
                               video_keys=(FRONT,), write_videos=True, episodes_per_file=1, seed=30)  # fmt: skip
    (src / "videos" / FRONT / "chunk-000" / "file-001.mp4").unlink()
    ds = open_quiet(src, root=tmp_path / "store", lazy=True)
    assert_frames_equal(ds[0][FRONT][None], Reference(src).frames(FRONT, 0)[:1], "lazy episode 0")
    with pytest.raises(NotMaterializedError, match="file-001.mp4"):
        ds[ds.episode_frames(1)[0]]


def test_videos_added_to_the_source_later_are_used(tmp_path, monkeypatch):
    """A local source's fingerprint covers its video files too: a video that arrives later gives a new store
    (the default one) with the camera."""
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "home"))
    src = write_sample_dataset(tmp_path / "src", n_episodes=2, lengths=(8, 12), image_shape=SMALL,
                               video_keys=(FRONT,), write_videos=True, episodes_per_file=1, seed=31)  # fmt: skip
    mp4 = src / "videos" / FRONT / "chunk-000" / "file-001.mp4"
    data = mp4.read_bytes()
    mp4.unlink()
    ds = open_left_out(src, cameras=[FRONT])
    assert sorted(ds.meta.unavailable[FRONT]) == [1]
    mp4.write_bytes(data)  # the video arrives (downloaded later, say)
    ds = open_dataset(src, progress=False)
    assert ds.meta.unavailable == {} and FRONT in ds[ds.episode_frames(1)[0]]


def test_svtav1_params_change_threads_not_bytes(tmp_path):
    """LEROBOT_ZARR_SVTAV1_PARAMS (the suite sets lp=1) gives the same bytes as the encoder's default."""
    pytest.importorskip("av")
    script = ("import sys, numpy as np; from lerobot_zarr.cameras.video import VideoWriter; "
              "f = np.random.default_rng(0).integers(0, 255, (6, 64, 96, 3), dtype=np.uint8); "
              "w = VideoWriter(sys.argv[1], 30, 96, 64); w.add(f); w.close()")
    out = {}
    for params in ("", "lp=1"):
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), LEROBOT_ZARR_SVTAV1_PARAMS=params)
        path = tmp_path / f"v{params or 'default'}.mp4"
        subprocess.run([sys.executable, "-c", script, str(path)], check=True, env=env, timeout=120)
        out[params] = path.read_bytes()
    assert out[""] == out["lp=1"] and len(out[""]) > 100
