"""A camera kept as mp4 (``storage="mp4"``), sampled in batches, against an independent reference (PyAV's sequential
decode of each whole file) and, where lerobot is installed, against LeRobot 0.6.1's own ``LeRobotDataset`` items (its
default video backend and PyAV's): LeRobot's AV1 and h264 encodings, several episodes per file, 1 and 2 decode
threads, forked workers; and G1-policy-train's real 480x640 AV1 camera when present."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hub_fixtures import real_dataset

av = pytest.importorskip("av", reason="PyAV (the video extra) is not installed")

import lerobot_zarr
from lerobot_zarr.testing.sample_data import write_sample_dataset

FPS = 30
AV1 = "observation.images.front"
H264 = "observation.images.wrist"
SHAPE = (48, 64, 3)
WINDOW = [-1 / FPS, 0.0]


def reencode_h264(path: Path) -> None:
    """Re-encode ``path`` as LeRobot 0.6.1 encodes with ``vcodec="h264"`` (g=2, crf=30, yuv420p), frame for frame."""
    tmp = path.with_suffix(".h264.mp4")
    with av.open(str(path)) as src, av.open(str(tmp), "w") as out:
        stream = out.add_stream("h264", FPS, options={"g": "2", "crf": "30"})
        stream.width, stream.height, stream.pix_fmt = SHAPE[1], SHAPE[0], "yuv420p"
        for frame in src.decode(src.streams.video[0]):
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame.to_ndarray(format="rgb24"), format="rgb24")))
        out.mux(stream.encode(None))
    tmp.replace(path)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A LeRobot v3.0 dataset, 5 episodes in two mp4 files, one camera in LeRobot's AV1 and one in its h264."""
    if "libx264" not in av.codecs_available:
        pytest.skip("PyAV has no libx264 encoder here")
    src = write_sample_dataset(tmp_path_factory.mktemp("mp4b") / "src", n_episodes=5, lengths=(15, 30), seed=3,
                               video_keys=(AV1, H264), write_videos=True, image_shape=SHAPE, episodes_per_file=3)
    for path in sorted((src / "videos" / H264).rglob("*.mp4")):
        reencode_h264(path)
    info = json.loads((src / "meta" / "info.json").read_text())
    info["features"][H264].setdefault("info", {})["video.codec"] = "h264"
    (src / "meta" / "info.json").write_text(json.dumps(info))
    return src


@pytest.fixture(scope="module")
def store(source, tmp_path_factory):
    ds = lerobot_zarr.open_dataset(source, root=tmp_path_factory.mktemp("mp4b") / "store",
                                   storage={AV1: "mp4", H264: "mp4"}, delta_timestamps={AV1: WINDOW, H264: WINDOW},
                                   progress=False)
    yield ds
    ds.close()


def sequential_frames(src: Path, camera: str) -> list[np.ndarray]:
    """Every episode's frames of ``camera``: each mp4 file decoded whole, in order, with PyAV (rgb24), cut at the
    episode table's ``from_timestamp`` (read here with pyarrow)."""
    info = json.loads((src / "meta" / "info.json").read_text())
    columns = ["episode_index", "length"] + [f"videos/{camera}/{k}" for k in ("chunk_index", "file_index",
                                                                              "from_timestamp")]
    table = pq.read_table(sorted((src / "meta" / "episodes").rglob("*.parquet")), columns=columns).to_pydict()
    decoded: dict[str, np.ndarray] = {}
    out = []
    for r in np.argsort(table["episode_index"]).tolist():
        rel = info["video_path"].format(video_key=camera, chunk_index=table[f"videos/{camera}/chunk_index"][r],
                                        file_index=table[f"videos/{camera}/file_index"][r])
        if rel not in decoded:
            with av.open(str(src / rel)) as container:
                stream = container.streams.video[0]
                frames = [(f.time, f.to_ndarray(format="rgb24")) for f in container.decode(stream)]
            assert all(abs(t - k / FPS) < 1e-6 for k, (t, _) in enumerate(frames))  # frame k at k / fps
            decoded[rel] = np.stack([f for _, f in frames])
        start = round(table[f"videos/{camera}/from_timestamp"][r] * FPS)
        out.append(decoded[rel][start:start + table["length"][r]])
    return out


def expected_windows(frames: list[np.ndarray], ds, indices: np.ndarray) -> np.ndarray:
    """LeRobot's 2-frame windows (clamped to the episode) of the positions ``indices``."""
    batch = ds.get_batch(indices)
    eps, local = batch["episode_index"], batch["frame_index"]
    return np.stack([frames[e][np.clip([f - 1, f], 0, len(frames[e]) - 1)] for e, f in zip(eps, local, strict=True)])


@pytest.mark.parametrize("threads", ["1", "2"])
def test_batches_equal_a_sequential_decode(source, store, threads, monkeypatch):
    monkeypatch.setenv("LEROBOT_ZARR_DECODE_THREADS", threads)
    want = {cam: sequential_frames(source, cam) for cam in (AV1, H264)}
    order = np.random.default_rng(int(threads)).permutation(len(store))
    for lo in range(0, len(order), 24):
        batch = store.get_batch(order[lo:lo + 24])
        for cam in (AV1, H264):
            assert np.array_equal(batch[cam], expected_windows(want[cam], store, order[lo:lo + 24])), (cam, lo)
    for i in (0, 1, len(store) // 2, len(store) - 1):
        item = store[i]
        for cam in (AV1, H264):
            assert np.array_equal(item[cam], expected_windows(want[cam], store, np.array([i]))[0]), (cam, i)


def _child_batch(conn, ds, indices) -> None:
    try:
        conn.send({cam: ds.get_batch(indices)[cam] for cam in (AV1, H264)})
    except BaseException as exc:  # noqa: BLE001 (sent to the parent, which fails the test with it)
        conn.send(repr(exc))
    conn.close()


@pytest.mark.filterwarnings("ignore:This process")
def test_forked_worker_reads_batches(store):
    """A forked child (a DataLoader worker) of a process whose containers are open and mid-stream reads the same
    batches through containers of its own; the parent's stay usable."""
    indices = np.random.default_rng(5).integers(0, len(store), 32)
    want = store.get_batch(indices)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child_batch, args=(child, store, indices))
    proc.start()
    assert parent.poll(120), "the forked child did not answer"
    got = parent.recv()
    proc.join(10)
    assert not isinstance(got, str), got
    for cam in (AV1, H264):
        assert np.array_equal(got[cam], want[cam]), cam
    assert np.array_equal(store.get_batch(indices[::-1])[AV1], want[AV1][::-1])


def test_dataloader_workers_read_batches(store):
    """torch's DataLoader with 2 forked workers over the mp4 cameras gives get_batch's batches."""
    torch = pytest.importorskip("torch", reason="torch is not installed (optional extra lerobot_zarr[torch])")
    from lerobot_zarr.torch import batch_loader

    store.get_batch(np.arange(8))  # containers open in the parent, as a loop's first batches leave them
    loader = batch_loader(store, batch_size=16, shuffle=True, num_workers=2)
    seen = 0
    for batch in loader:
        want = store.get_batch(batch["index"].numpy())
        for cam in (AV1, H264):
            assert isinstance(batch[cam], torch.Tensor) and np.array_equal(batch[cam].numpy(), want[cam]), cam
        seen += len(batch["index"])
    assert seen == len(store)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to count open files")
def test_closing_or_dropping_the_dataset_closes_its_videos(store):
    videos = {os.path.realpath(p) for p in Path(store.root).rglob("*.mp4")}

    def open_videos() -> int:
        return sum(os.path.realpath(fd.readlink()) in videos for fd in Path("/proc/self/fd").iterdir()
                   if fd.is_symlink())

    before = open_videos()  # the module's store has its own open
    ds = lerobot_zarr.open_dataset(store.root, delta_timestamps={AV1: WINDOW}, progress=False)
    ds.get_batch(np.arange(0, len(ds), 7))
    assert open_videos() > before
    ds.close()
    assert open_videos() == before
    dropped = lerobot_zarr.open_dataset(store.root, delta_timestamps={AV1: WINDOW}, progress=False)
    dropped.get_batch(np.arange(0, len(dropped), 7))
    assert open_videos() > before
    del dropped  # without close(): its files close with it, not at the next garbage collection
    assert open_videos() == before


@pytest.mark.parametrize("backend", [None, "pyav"])
def test_items_equal_lerobots(source, store, backend, monkeypatch):
    """Every item's camera windows equal LeRobot's own LeRobotDataset's (uint8, as its training factory asks them:
    ``return_uint8=True``) on the same folder, with its default video backend (torchcodec where it loads) and PyAV."""
    pytest.importorskip("lerobot", reason="lerobot is not installed (LeRobot 0.6.1's decode was not compared)")
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError as exc:
        pytest.skip(f"lerobot is installed but its LeRobotDataset does not import: {exc}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    theirs = LeRobotDataset("local/mp4", root=source, delta_timestamps={AV1: WINDOW, H264: WINDOW},
                            return_uint8=True, video_backend=backend)
    assert len(theirs) == len(store)
    ours = store.get_batch(np.arange(len(store)))
    for i in range(len(store)):
        item = theirs[i]
        for cam in (AV1, H264):
            got = np.ascontiguousarray(ours[cam][i].transpose(0, 3, 1, 2))  # ours HWC, LeRobot's CHW
            assert np.array_equal(item[cam].numpy(), got), (backend, i, cam)


def test_g1_real_camera_batches_equal_a_sequential_decode(tmp_path):
    """G1-policy-train's real 480x640 AV1 camera (LeRobot v2.1, one mp4 per episode) kept as mp4: random batches
    of 2-frame windows and the episodes' edges equal PyAV's sequential decode of the files."""
    src = real_dataset("G1-policy-train")
    cam = "observation.images.cam_high"
    episodes = [2, 4]
    ds = lerobot_zarr.open_dataset(src, root=tmp_path / "g1", episodes=episodes, storage={cam: "mp4"},
                                   delta_timestamps={cam: WINDOW}, progress=False)
    rng = np.random.default_rng(11)
    batches = [rng.integers(0, len(ds), 48) for _ in range(2)]
    ends = np.cumsum([0] + [int(ds.meta.episode_length[e]) for e in episodes])
    assert ends[-1] == len(ds)
    batches.append(np.unique(np.concatenate([ends[:-1], ends[:-1] + 1, ends[1:] - 1])))
    got = [ds.get_batch(b) for b in batches]
    needed: dict[int, set[int]] = {}
    for b in got:
        for e, f in zip(b["episode_index"].tolist(), b["frame_index"].tolist(), strict=True):
            needed.setdefault(e, set()).update({max(f - 1, 0), f})
    frames: dict[tuple[int, int], np.ndarray] = {}
    for e in episodes:
        with av.open(str(src / "videos" / "chunk-000" / cam / f"episode_{e:06d}.mp4")) as container:
            for k, frame in enumerate(container.decode(container.streams.video[0])):
                if k in needed[e]:
                    frames[e, k] = frame.to_ndarray(format="rgb24")
    for b in got:
        for j, (e, f) in enumerate(zip(b["episode_index"].tolist(), b["frame_index"].tolist(), strict=True)):
            assert np.array_equal(b[cam][j, 0], frames[e, max(f - 1, 0)]) and np.array_equal(b[cam][j, 1], frames[e, f])
    ds.close()


def test_depth_video_kept_as_mp4_gives_its_12bit_codes(tmp_path, monkeypatch):
    """A depth camera kept as mp4 decodes LeRobot's 12-bit codes (uint16, lossless HEVC with ``gray12le``): every
    frame, windows and episode edges equal the codes written, dequantized as a raw store of the same source gives
    them; several episodes per file, 1 and 2 decode threads. Other storages and resizing are refused."""
    depth = "observation.images.depth"
    src = write_sample_dataset(tmp_path / "src", n_episodes=3, lengths=[7, 4, 6], depth_video_keys=(depth,),
                               image_shape=(16, 24, 3), write_videos=True, episodes_per_file=2, video_keys=())
    mp4 = lerobot_zarr.open_dataset(src, root=tmp_path / "mp4", storage={depth: "mp4"},
                                    delta_timestamps={depth: WINDOW}, progress=False)
    raw = lerobot_zarr.open_dataset(src, root=tmp_path / "raw", delta_timestamps={depth: WINDOW}, progress=False)
    assert mp4.array_specs[depth].storage == "mp4" and mp4.array_specs[depth].dtype == np.uint16
    from lerobot_zarr.cameras.depth import DepthOutput
    from lerobot_zarr.testing.sample_data import depth_codes

    to_mm = DepthOutput(mp4.meta.features[depth], "video", "mm")
    indices = np.random.default_rng(5).permutation(len(mp4))
    want = raw.get_batch(indices)[depth]
    for threads in ("1", "2"):
        monkeypatch.setenv("LEROBOT_ZARR_DECODE_THREADS", threads)
        got = mp4.get_batch(indices)
        assert got[depth].dtype == np.float32 and np.array_equal(got[depth], want), threads
        for j, (e, f) in enumerate(zip(got["episode_index"].tolist(), got["frame_index"].tolist(), strict=True)):
            codes = [depth_codes(0, e, max(f - 1, 0), (16, 24, 1)), depth_codes(0, e, f, (16, 24, 1))]
            assert np.array_equal(got[depth][j], to_mm(np.stack(codes))), (e, f)
    mp4.close()
    raw.close()
    for storage, resize in (({depth: "compact"}, None), ({depth: "mp4"}, {depth: (8, 12)})):  # depth kept as it is
        with pytest.raises(lerobot_zarr.ArgumentError, match="is a depth map"):
            lerobot_zarr.open_dataset(src, root=tmp_path / "refused", storage=storage, resize=resize, progress=False)
