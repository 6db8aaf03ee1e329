"""Resize/crop of camera frames against an independent float64 reference written from the documented definition
of antialiased resampling (the filter stretched by the downscaling factor, pixel centres aligned, weights
normalised, rows then columns through an 8-bit image), and against torchvision's antialiased resize when
torchvision is importable."""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_zarr.cameras.resize import INTERPOLATIONS, check_resize, resize_frame, resize_frames
from lerobot_zarr.errors import UnsupportedDtypeError

TOLERANCE = 1  # max abs difference to the float64 reference (the resampler's weights are fixed-point)


def triangle(x: np.ndarray) -> np.ndarray:
    return np.clip(1.0 - np.abs(x), 0.0, None)


def keys_cubic(x: np.ndarray, a: float = -0.5) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1, (a + 2) * x**3 - (a + 3) * x**2 + 1,
                    np.where(x < 2, a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a, 0.0))


def box(x: np.ndarray) -> np.ndarray:
    return ((x > -0.5) & (x <= 0.5)).astype(np.float64)


FILTERS = {"bilinear": (triangle, 1.0), "bicubic": (keys_cubic, 2.0), "box": (box, 0.5)}


def weights(n_in: int, n_out: int, interpolation: str) -> np.ndarray:
    """(n_out, n_in) matrix: output pixel i = sum_j W[i, j] * input pixel j.

    Output pixel i covers input coordinates [i * s, (i + 1) * s) with s = n_in / n_out; its centre is
    c = (i + 0.5) * s. The filter is stretched by max(s, 1) (antialiasing when shrinking) and evaluated at the
    input pixel centres j + 0.5, over the input pixels within the filter's support, then normalised."""
    f, support = FILTERS[interpolation]
    s = n_in / n_out
    stretch = max(s, 1.0)
    centre = (np.arange(n_out) + 0.5) * s
    j = np.arange(n_in)
    w = f((j[None, :] + 0.5 - centre[:, None]) / stretch)
    # the support window as Pillow cuts it (pixels whose index lies in [centre - support*stretch + 0.5, ...))
    lo = np.maximum((centre - support * stretch + 0.5).astype(np.int64), 0)
    hi = np.minimum((centre + support * stretch + 0.5).astype(np.int64), n_in)
    w = np.where((j[None, :] >= lo[:, None]) & (j[None, :] < hi[:, None]), w, 0.0)
    return w / w.sum(axis=1, keepdims=True)


def to_uint8(x: np.ndarray) -> np.ndarray:
    return np.clip(np.floor(x + 0.5), 0, 255).astype(np.uint8)  # halves up, as 8-bit resamplers round


def reference_resize(frame: np.ndarray, size: tuple[int, int], interpolation: str) -> np.ndarray:
    """Separable: along each row first, to an 8-bit image, then down each column (the documented order)."""
    h, w = size
    wy = weights(frame.shape[0], h, interpolation)
    wx = weights(frame.shape[1], w, interpolation)
    across = to_uint8(np.einsum("jkc,lk->jlc", frame.astype(np.float64), wx))
    return to_uint8(np.einsum("ij,jlc->ilc", wy, across.astype(np.float64)))


def camera_frame(shape: tuple[int, int, int], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    h, w, c = shape
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([128 + 100 * np.sin(x / (5 + 3 * k) + y / (9 + k)) for k in range(c)], axis=-1)
    img[h // 3: h // 2, w // 4: w // 2] = 250  # sharp edges, where filters differ most
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("interpolation", INTERPOLATIONS)
@pytest.mark.parametrize("src,size", [((480, 640, 3), (224, 224)), ((480, 640, 3), (96, 96)),
                                      ((120, 160, 3), (60, 80)), ((50, 70, 3), (37, 23)),
                                      ((10, 12, 3), (25, 31)), ((33, 47, 1), (16, 20))])
def test_resize_matches_the_reference(interpolation, src, size):
    frame = camera_frame(src)
    got = resize_frame(frame, size, interpolation=interpolation)
    want = reference_resize(frame, size, interpolation)
    assert got.shape == (*size, src[2]) and got.dtype == np.uint8
    diff = np.abs(got.astype(np.int16) - want)
    assert diff.max() <= TOLERANCE and diff.mean() < 0.05, (diff.max(), diff.mean())


def test_reference_tells_filters_apart():
    """The comparison above could fail: the three filters give different images."""
    frame = camera_frame((120, 160, 3))
    a, b, c = (resize_frame(frame, (50, 70), interpolation=i) for i in INTERPOLATIONS)
    for x, y in ((a, b), (a, c), (b, c)):
        assert np.abs(x.astype(np.int16) - y).max() > 3 * TOLERANCE
    # and antialiasing matters: taking every other pixel is far from the filtered result
    assert np.abs(resize_frame(frame, (60, 80)).astype(np.int16) - frame[1::2, 1::2]).max() > 10


def test_crop_then_resize():
    frame = camera_frame((96, 128, 3))
    crop = (10, 20, 64, 80)
    got = resize_frame(frame, (32, 40), crop=crop)
    want = reference_resize(frame[10:74, 20:100], (32, 40), "bilinear")
    assert np.abs(got.astype(np.int16) - want).max() <= TOLERANCE
    assert np.array_equal(resize_frame(frame, (64, 80), crop=crop, interpolation="box"), frame[10:74, 20:100])


def test_same_size_is_identity_and_channels_are_independent():
    frame = camera_frame((30, 40, 4))
    for interpolation in INTERPOLATIONS:
        assert np.array_equal(resize_frame(frame, (30, 40), interpolation=interpolation), frame)
    small = resize_frame(frame, (15, 20))
    for c in range(4):
        assert np.array_equal(small[..., c], resize_frame(frame[..., c:c + 1], (15, 20))[..., 0])


def test_resize_frames_in_parallel_equals_one_by_one():
    frames = np.stack([camera_frame((48, 64, 3), seed=s) for s in range(5)])
    one = np.stack([resize_frame(f, (24, 20)) for f in frames])
    for threads in (1, 2, 4):
        assert np.array_equal(resize_frames(frames, (24, 20), threads=threads), one)
    assert resize_frames(frames[:0], (24, 20)).shape == (0, 24, 20, 3)


def test_bad_resizes_are_refused():
    frame = camera_frame((20, 30, 3))
    for kwargs in ({"size": (0, 5)}, {"size": (5,)}, {"size": (5.5, 4)}, {"size": (5, 5), "interpolation": "area"},
                   {"size": (5, 5), "crop": (0, 0, 21, 5)}, {"size": (5, 5), "crop": (-1, 0, 5, 5)},
                   {"size": (5, 5), "crop": (0, 0, 5)}):
        with pytest.raises(ValueError):
            resize_frame(frame, **kwargs)
    with pytest.raises(UnsupportedDtypeError):
        resize_frame(frame.astype(np.float32), (5, 5))
    with pytest.raises(ValueError):
        resize_frames(frame, (5, 5))  # one frame, not a stack
    assert check_resize((480, 640, 3), (224, 224), crop=(0, 80, 480, 480)) == (224, 224, 3)


def test_matches_torchvision_antialiased_resize():
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision.transforms.v2.functional")
    frame = camera_frame((480, 640, 3))
    for interpolation, mode in (("bilinear", tv.InterpolationMode.BILINEAR),
                                ("bicubic", tv.InterpolationMode.BICUBIC)):
        theirs = tv.resize(torch.from_numpy(frame).permute(2, 0, 1), [96, 96], interpolation=mode, antialias=True)
        ours = resize_frame(frame, (96, 96), interpolation=interpolation)
        diff = np.abs(theirs.permute(1, 2, 0).numpy().astype(np.int16) - ours)
        assert diff.max() <= 2 and diff.mean() < 0.5, (interpolation, diff.max(), diff.mean())
