"""Cameras kept per the user's choice (``storage=``, ``resize=``): every option samples through the same API with
LeRobot's semantics and round-trips within its documented error (lossless ones exactly, against the raw store,
which the video tests check against PyAV's own decode); resized cameras equal an independent float64 reference
resize (tests/cameras/test_resize.py); zarr reads compressed cameras; exports of each option reopen, and load in LeRobot
when it is installed."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_resize import reference_resize

import lerobot_zarr as lz
from lerobot_zarr import ReadOnlyStoreError, SourceMismatchError
from lerobot_zarr.store.state import read_state
from lerobot_zarr.testing.sample_data import write_sample_dataset

pytest.importorskip("av")
CAM, IMG = "observation.images.front", "observation.images.wrist"
SHAPE = (48, 64, 3)
FPS = 30
DELTAS = {CAM: [-2 / FPS, 0.0, 1 / FPS]}
OPTIONS = {"raw": 0.0, "compact": 0.0, "lossless": 0.0, "jpeg": 6.0, "jpeg:80": 8.0, "mp4": 0.0}  # synthetic frames: busier than real footage


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return write_sample_dataset(tmp_path_factory.mktemp("cams") / "src", n_episodes=4, lengths=(20, 30),
                                image_shape=SHAPE, image_keys=(IMG,), video_keys=(CAM,), write_videos=True,
                                episodes_per_file=2, seed=11)


@pytest.fixture(scope="module")
def stores(source, tmp_path_factory) -> dict[str, lz.LeRobotZarrDataset]:
    work = tmp_path_factory.mktemp("stores")
    return {option: lz.open_dataset(source, root=work / option.replace(":", "-"), progress=False,
                                    storage={CAM: option}, delta_timestamps=DELTAS)
            for option in OPTIONS}


def mean_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


@pytest.mark.parametrize("option", OPTIONS)
def test_every_option_samples_like_raw(stores, option):
    raw, ds = stores["raw"], stores[option]
    assert ds.array_specs[CAM].storage == {"raw": "raw", "mp4": "mp4"}.get(option, "compact")
    idx = np.random.default_rng(0).permutation(len(ds))
    want, got = raw.get_batch(idx), ds.get_batch(idx)
    assert got[CAM].shape == want[CAM].shape == (len(idx), 3, *SHAPE) and got[CAM].dtype == np.uint8
    np.testing.assert_array_equal(got[f"{CAM}_is_pad"], want[f"{CAM}_is_pad"])
    error = mean_error(got[CAM], want[CAM])
    if OPTIONS[option] == 0:
        np.testing.assert_array_equal(got[CAM], want[CAM])
    else:
        assert 0 < error <= OPTIONS[option], f"{option}: mean abs error {error:.2f}"
    for i in idx[:25].tolist():  # ds[i] and get_batch agree, padding at the episode edges included
        item = ds[i]
        np.testing.assert_array_equal(item[CAM], got[CAM][np.flatnonzero(idx == i)[0]])
    for e in range(ds.meta.total_episodes):
        frames = np.asarray(ds.episode(e)[CAM])
        assert frames.shape == (ds.meta.episode_length[e], *SHAPE)


def test_sizes_on_disk(stores, source):
    mp4 = sum(p.stat().st_size for p in (source / "videos" / CAM).rglob("*.mp4"))

    def camera_bytes(option):
        root = Path(stores[option].root)
        return sum(p.stat().st_size for p in (root / CAM).rglob("*") if p.is_file())

    sizes = {option: camera_bytes(option) for option in OPTIONS}
    records = sum(p.stat().st_size for p in (Path(stores["mp4"].root) / CAM).rglob(".*.linked"))  # (hard links)
    assert records < 200 * len(list((source / "videos" / CAM).rglob("*.mp4")))
    assert sizes["mp4"] == mp4 + (Path(stores["mp4"].root) / CAM / "mp4.json").stat().st_size + records, "mp4 kept: 1x"
    assert sizes["jpeg:80"] < sizes["jpeg"] < sizes["lossless"] < sizes["raw"]
    assert sizes["compact"] < sizes["raw"]


def test_zarr_reads_compressed_cameras(stores):
    import zarr

    for option in ("compact", "lossless", "jpeg"):
        ds = stores[option]
        group = zarr.open_group(ds.root, mode="r")
        state = read_state(ds.root)
        frames = np.asarray(group[CAM][:])
        rows = np.concatenate([np.arange(f, f + n) for f, n in zip(state.episode_frame(), state.table.length)])
        np.testing.assert_array_equal(frames[rows], np.asarray(ds.get_batch(np.arange(len(ds)))[CAM][:, 1]))
    assert CAM not in zarr.open_group(stores["mp4"].root, mode="r"), "an mp4-kept camera is not a zarr array"


@pytest.mark.parametrize("imports", ["import zarr\nimport lerobot_zarr", "import lerobot_zarr\nimport zarr",
                                     "import zarr"], ids=["zarr-first", "lerobot_zarr-first", "zarr-only"])
def test_a_fresh_zarr_reads_compressed_cameras(stores, imports):
    """A plain zarr reader in a fresh process reads the compressed cameras of a store through the codecs' entry
    points, whatever it imported first and with lerobot_zarr never imported (rectilinear chunks then switched on
    by the environment, as docs/store-format.md says)."""
    import hashlib
    import os
    import subprocess
    import sys

    import zarr

    roots = [str(stores[option].root) for option in ("lossless", "jpeg")]
    code = (f"{imports}\nimport hashlib, numpy as np\n"
            f"for root in {roots!r}:\n"
            f"    print(hashlib.sha256(np.ascontiguousarray(zarr.open_group(root, mode='r')[{CAM!r}][:])).hexdigest())\n")
    env = {k: v for k, v in os.environ.items() if k != "ZARR_ARRAY__RECTILINEAR_CHUNKS"}
    if "lerobot_zarr" not in imports:
        env["ZARR_ARRAY__RECTILINEAR_CHUNKS"] = "True"
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env,
                          timeout=120, cwd=str(Path(__file__).parents[1]))
    assert proc.returncode == 0, proc.stderr[-2000:]
    want = [hashlib.sha256(np.ascontiguousarray(zarr.open_group(root, mode="r")[CAM][:])).hexdigest()
            for root in roots]
    assert proc.stdout.split() == want


@pytest.mark.parametrize("option", ["raw", "lossless", "jpeg", "mp4"])
def test_resize_matches_an_independent_reference(source, stores, tmp_path, option):
    ds = lz.open_dataset(source, root=tmp_path / "small", storage={CAM: option}, resize={CAM: (24, 20), IMG: (16, 16)},
                         progress=False)
    assert ds.array_specs[CAM].frame_shape == (24, 20, 3) and ds.meta.features[CAM]["shape"] == [24, 20, 3]
    assert ds.meta.features[IMG]["shape"] == [16, 16, 3]
    resize = read_state(ds.root).arrays[CAM].resize_spec
    assert resize["from"] == list(SHAPE) and resize["size"] == [24, 20] and resize["interpolation"] == "bilinear"
    full = stores["raw"]
    got = ds.get_batch(np.arange(len(ds)))
    want = full.get_batch(np.arange(len(full)))
    sources = {CAM: np.asarray(want[CAM])[:, 1], IMG: np.asarray(want[IMG])}  # window offset 0: the frame itself
    for key, size, tolerance in ((CAM, (24, 20), 2 * OPTIONS[option]), (IMG, (16, 16), 0.0)):  # tiny JPEGs: coarser
        reference = np.stack([reference_resize(f, size, "bilinear") for f in sources[key]])
        frames = np.asarray(got[key])
        if not tolerance:  # Pillow's fixed-point weights: within 1 of the float64 definition
            assert np.abs(frames.astype(np.int16) - reference.astype(np.int16)).max() <= 1, key
        assert mean_error(frames, reference) <= 0.1 + tolerance, key


def test_a_store_keeps_its_choices(source, stores):
    with pytest.raises(SourceMismatchError, match=f"keeps '{CAM}' raw, not jpeg:90 as asked"):
        lz.open_dataset(source, root=stores["raw"].root, storage={CAM: "jpeg"}, progress=False)
    with pytest.raises(SourceMismatchError, match=f"keeps '{CAM}' jpeg:90, not raw, resized to 24x24 as asked"):
        lz.open_dataset(source, root=stores["jpeg"].root, resize={CAM: (24, 24)}, progress=False)
    with pytest.raises(lz.ArgumentError, match="mp4"):
        lz.open_dataset(source, root=Path(stores["raw"].root).parent / "img-mp4", storage={IMG: "mp4"})
    with pytest.raises(lz.ArgumentError, match="storages"):
        lz.open_dataset(source, root=Path(stores["raw"].root).parent / "bogus", storage={CAM: "png-ish"})
    with pytest.raises(ReadOnlyStoreError, match="compressed frames|raw storage"):
        lz.open_dataset(stores["jpeg"].root, mode="r+", progress=False)


@pytest.mark.parametrize("option", ["lossless", "jpeg", "mp4"])
def test_exports_of_each_option_reopen(stores, source, tmp_path, option):
    ds = stores[option]
    out = ds.to_lerobot(tmp_path / "export", progress=False)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"][CAM]["dtype"] == "video"
    if option == "mp4":  # the source's files, byte for byte
        for src_file in sorted((source / "videos" / CAM).rglob("*.mp4")):
            rel = src_file.relative_to(source)
            assert (out / rel).read_bytes() == src_file.read_bytes(), rel
    again = lz.open_dataset(out, root=tmp_path / "again", progress=False)
    got = again.get_batch(np.arange(len(again)))[CAM]
    want = ds.get_batch(np.arange(len(ds)))[CAM][:, 1]
    limit = 0.0 if option == "mp4" else 6.0  # re-encoded as LeRobot's AV1 otherwise (lossy)
    assert mean_error(got, want) <= limit
    images = ds.to_lerobot(tmp_path / "as-images", videos=False, progress=False)
    exact = lz.open_dataset(images, root=tmp_path / "images-store", progress=False)
    np.testing.assert_array_equal(exact.get_batch(np.arange(len(exact)))[CAM], want)


@pytest.mark.parametrize("option", ["jpeg", "mp4"])
def test_lerobot_loads_the_export(stores, tmp_path, option):
    lerobot = pytest.importorskip("lerobot", reason="lerobot is not installed here: LeRobotDataset not checked")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = stores[option]
    out = ds.to_lerobot(tmp_path / "export", progress=False)
    theirs = LeRobotDataset("local/export", root=out, video_backend="pyav")
    assert len(theirs) == len(ds) and lerobot is not None
    item = theirs[5]
    ours = ds[5]
    frame = (item[CAM].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
    assert mean_error(frame, ours[CAM][1]) <= 6.0


def test_camera_choices_get_a_cache_store_of_their_own_and_an_old_one_says_so(source, tmp_path, monkeypatch):
    """Without root=, a store made with camera choices is a cache entry of its own: plain opens keep the source's
    values. A plain cache store made resized by an earlier version (choices then replaced it) warns, with the fix."""
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", lz.LeRobotZarrWarning)
        made = lz.open_dataset(source, resize={CAM: (24, 20)}, progress=False)  # the choice made here: no warning
        assert lz.open_dataset(source, resize={CAM: (24, 20)}, progress=False).root == made.root  # the same store
        plain = lz.open_dataset(source, progress=False)
    assert plain.root != made.root and plain[0][CAM].shape[-3:-1] == SHAPE[:2] and made[0][CAM].shape[-3:-1] == (24, 20)
    # what earlier versions left: the resized store in the plain store's place
    plain.close()
    shutil.rmtree(plain.root)
    shutil.copytree(made.root, plain.root)
    with pytest.warns(lz.LeRobotZarrWarning, match=rf"'{CAM}' is stored raw, resized to 24x20, as "
                                                   r"chosen when this store was made.*cache rm") as caught:
        again = lz.open_dataset(source, progress=False)
    assert again.root == plain.root and again[0][CAM].shape[-3:-1] == (24, 20)
    assert caught[0].filename == __file__, "the warning points at the user's line"
