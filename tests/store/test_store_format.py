"""The on-disk store is a plain Zarr v3 group (see the lerobot_zarr.store.state docstring): check it with zarr, xarray,
raw file reads and an independent pyarrow/PIL reference of the source, on a real and on generated datasets.
"""

from __future__ import annotations

import io
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr
from PIL import Image

import lerobot_zarr  # noqa: F401  (must come first: enables zarr's rectilinear chunk grids)
from lerobot_zarr import open_dataset

REAL_DIR = (Path(__file__).parents[2] / ".." / "shared" / "datasets").resolve()
CAM = "observation.images.cam"
GRID = "observation.grid"
VIDEO = "observation.images.video"
EPISODE_ARRAYS = ("episode_start", "episode_end", "episode_length", "episode_task_index", "episode_chunk",
                  "episode_offset", "episode_frame")
BOOKKEEPING = (*EPISODE_ARRAYS, "frame_live")
PACK_ROWS = 50  # stores here are made with packs of 50 frames of their widest feature: several per dataset

# name -> write_sample_dataset keyword arguments
GENERATED = {
    "png": dict(n_episodes=6, lengths=(15, 40), image_keys=(CAM,), extra_nd=True, video_keys=(VIDEO,)),
    "jpeg": dict(n_episodes=3, lengths=(10, 20), image_keys=(CAM,), image_format="jpeg", seed=1),
    "list": dict(n_episodes=5, vector_type="list", extra_nd=True, episodes_per_file=2, seed=2),
    "v2.1": dict(version="v2.1", n_episodes=5, lengths=(10, 30), image_keys=(CAM,), extra_nd=True, seed=3,
                 tasks=("a", "b", "c")),
    "one-row-group": dict(n_episodes=7, lengths=(5, 25), episodes_per_file=3, row_group_per_episode=False, seed=4),
    "zeros": dict(n_episodes=4, lengths=(10, 20), image_keys=(CAM,), seed=5),  # then zeroed, see _zero_episodes
}
STORES = ["record-test", *GENERATED]


# ---------------------------------------------------------------------------------------------------------------
# Independent reference of a LeRobot folder: pyarrow + json + PIL only
# ---------------------------------------------------------------------------------------------------------------
def _json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _decode(png_or_jpeg: bytes) -> np.ndarray:
    img = np.asarray(Image.open(io.BytesIO(png_or_jpeg)))
    return img[..., None] if img.ndim == 2 else img


@dataclass
class Ref:
    info: dict
    frames: dict[str, np.ndarray]  # stored feature -> (total_frames, ...) in global index order
    lengths: np.ndarray
    tasks: dict[int, str]

    @property
    def stored(self) -> list[str]:
        """Features stored from the data parquet (the reference holds their frames)."""
        return [k for k, f in self.info["features"].items() if f["dtype"] not in ("video", "string")]

    @property
    def videos(self) -> list[str]:
        """Cameras kept as mp4: stored too, as uint8 frames decoded from the videos (none exist for these sources:
        every episode of them is unavailable)."""
        return [k for k, f in self.info["features"].items() if f["dtype"] == "video"]

    @property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)

    def packs(self, target: int = PACK_ROWS) -> list[list[int]]:
        """The contract's packing, written out: consecutive episodes while they fit ``target`` rows (an episode
        longer than that alone)."""
        packs: list[list[int]] = []
        used = target
        for e, n in enumerate(self.lengths.tolist()):
            if used + n > target and used > 0:
                packs.append([])
                used = 0
            packs[-1].append(e)
            used += n
        return packs

    def pack_sizes(self) -> tuple[int, ...]:
        return tuple(int(self.lengths[p].sum()) for p in self.packs())


def reference(src: Path) -> Ref:
    info = _json(src / "meta" / "info.json")
    v3 = str(info["codebase_version"]).startswith("v3")
    feats = info["features"]
    keys = [k for k, f in feats.items() if f["dtype"] not in ("video", "string")]
    pieces: dict[str, list] = {k: [] for k in keys}
    for path in sorted((src / "data").glob("*/*.parquet")):
        table = pq.read_table(path)
        for k in keys:
            values = table.column(k).to_pylist()
            if feats[k]["dtype"] == "image":
                pieces[k].append(np.stack([_decode(v["bytes"]) for v in values]))
            else:
                pieces[k].append(np.array(values, dtype=np.dtype(feats[k]["dtype"])))
    frames = {k: np.concatenate(v) for k, v in pieces.items()}
    order = np.argsort(frames["index"], kind="stable")
    frames = {k: v[order] for k, v in frames.items()}
    if v3:
        rows = []
        for f in sorted((src / "meta" / "episodes").glob("*/*.parquet")):
            t = pq.read_table(f, columns=["episode_index", "length"])
            rows += zip(t.column("episode_index").to_pylist(), t.column("length").to_pylist(), strict=True)
        table = pq.read_table(src / "meta" / "tasks.parquet")
        pandas_meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
        text = ([c for c in pandas_meta.get("index_columns", []) if isinstance(c, str)] or ["task"])[0]
        tasks = dict(zip(table.column("task_index").to_pylist(), table.column(text).to_pylist(), strict=True))
    else:
        rows = [(r["episode_index"], r["length"]) for r in _jsonl(src / "meta" / "episodes.jsonl")]
        tasks = {r["task_index"]: r["task"] for r in _jsonl(src / "meta" / "tasks.jsonl")}
    lengths = np.array([n for _, n in sorted(rows)], dtype=np.int64)
    assert np.array_equal(frames["index"], np.arange(lengths.sum())), f"{src}: reference index not contiguous"
    return Ref(info, frames, lengths, tasks)


def assert_same_bits(actual, expected: np.ndarray, what: str) -> None:
    actual = np.asarray(actual)
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    if actual.tobytes() != expected.tobytes():
        a = np.ascontiguousarray(actual).reshape(len(actual), -1).view(np.uint8)
        b = np.ascontiguousarray(expected).reshape(len(expected), -1).view(np.uint8)
        bad = np.flatnonzero((a != b).any(axis=1))
        raise AssertionError(f"{what}: {len(bad)} of {len(a)} frames differ, first at position {int(bad[0])}")


# ---------------------------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class Built:
    name: str
    src: Path
    store: Path
    ds: object
    ref: Ref


def _write_sample(path: Path, **kwargs) -> Path:
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    return Path(write_sample_dataset(path, **kwargs))


def _zero_episodes(src: Path) -> None:
    """Rewrite the (single) data file: action of episode 2 all zeros, images of episode 1 black (real data)."""
    (path,) = sorted((src / "data").glob("*/*.parquet"))
    pf = pq.ParquetFile(path)
    schema = pf.schema_arrow
    table = pf.read()
    ep = np.asarray(table.column("episode_index").to_pylist())
    action = np.array(table.column("action").to_pylist(), dtype=np.float32)
    action[ep == 2] = 0
    table = table.set_column(schema.get_field_index("action"), schema.field("action"),
                             pa.array(action.tolist(), type=schema.field("action").type))
    images = table.column(CAM).to_pylist()
    h, w, c = _decode(images[0]["bytes"]).shape
    buf = io.BytesIO()
    Image.fromarray(np.zeros((h, w, c), dtype=np.uint8)).save(buf, format="PNG")
    for i in np.flatnonzero(ep == 1):
        images[i] = {"bytes": buf.getvalue(), "path": images[i]["path"]}
    table = table.set_column(schema.get_field_index(CAM), schema.field(CAM),
                             pa.array(images, type=schema.field(CAM).type))
    rg_rows = [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)]
    pf.close()
    with pq.ParquetWriter(path, schema) as writer:
        start = 0
        for n in rg_rows:
            writer.write_table(table.slice(start, n))
            start += n


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("store_format")


_BUILT: dict[str, Built] = {}


def _build(name: str, workdir: Path) -> Built:
    if name in _BUILT:
        return _BUILT[name]
    if name == "record-test":
        src = REAL_DIR / "record-test"
        if not (src / "meta" / "info.json").is_file():
            pytest.skip(f"real dataset record-test not found in {REAL_DIR}")
    else:
        src = _write_sample(workdir / f"src-{name}", **GENERATED[name])
        if name == "zeros":
            _zero_episodes(src)
    store = workdir / f"store-{name}"
    ref = reference(src)
    widest = max(ref.frames[k][0].nbytes for k in ref.stored)
    for k in ref.videos:
        widest = max(widest, int(np.prod(ref.info["features"][k]["shape"])))
    ds = open_dataset(src, root=store, progress=False, pack_bytes=widest * PACK_ROWS)
    _BUILT[name] = Built(name, src, store, ds, ref)
    return _BUILT[name]


@pytest.fixture(scope="module", autouse=True)
def _clear_cache():
    yield
    _BUILT.clear()


@pytest.fixture(params=STORES)
def built(request, workdir) -> Built:
    return _build(request.param, workdir)


def _open_group(store: Path) -> zarr.Group:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_group(store, mode="r")


# ---------------------------------------------------------------------------------------------------------------
# Format checks on every store
# ---------------------------------------------------------------------------------------------------------------
def test_zarr_values_equal_dataset_and_source(built: Built):
    g = _open_group(built.store)
    ref = built.ref
    arrays = {name for name, _ in g.arrays()}
    batch = built.ds.get_batch(np.arange(len(built.ds)))
    assert arrays == set(ref.stored) | set(ref.videos) | set(BOOKKEEPING), \
        f"{built.name}: zarr arrays {sorted(arrays)} != stored features + videos + episode table + frame_live"
    assert g["frame_live"][:].all(), f"{built.name}: a store made from a source has only live rows"
    for name in ref.videos:  # described like images (their frames: none, every video of these sources is missing)
        shape = tuple(ref.info["features"][name]["shape"])
        assert g[name].shape == (int(ref.lengths.sum()), *shape) and g[name].dtype == np.uint8, name
        assert name not in batch, f"{built.name}: {name} sampled although its videos are missing"
    for name in ref.stored:
        values = g[name][:]
        assert_same_bits(values, ref.frames[name], f"{built.name}: zarr {name} vs source")
        assert_same_bits(batch[name], values, f"{built.name}: get_batch {name} vs zarr")
    assert list(batch["task"]) == [ref.tasks[t] for t in ref.frames["task_index"].tolist()], \
        f"{built.name}: task strings differ"


def test_dimension_names_and_packed_chunks(built: Built):
    g = _open_group(built.store)
    lengths = built.ref.pack_sizes()
    assert len(lengths) > 1 or built.name == "one-row-group" or built.ref.lengths.sum() <= PACK_ROWS, \
        f"{built.name}: the test means to cross pack boundaries"
    for name in built.ref.stored:
        a = g[name]
        dims = a.metadata.dimension_names
        assert dims is not None and dims[0] == "frame", f"{built.name}: {name} dimension_names {dims}"
        assert len(dims) == a.ndim and len(set(dims)) == a.ndim, f"{built.name}: {name} dimension_names {dims}"
        assert all(d.startswith(f"{name}.") for d in dims[1:]), \
            f"{built.name}: trailing dimension names of {name} should be '<feature>.<axis>': {dims}"
        if built.ref.info["features"][name]["dtype"] == "image":
            assert dims[1:] == (f"{name}.height", f"{name}.width", f"{name}.channels"), f"{name}: {dims}"
        sizes = a.read_chunk_sizes
        assert tuple(sizes[0]) == lengths, f"{built.name}: {name} frame chunks {sizes[0]} != pack sizes {lengths}"
        assert [tuple(s) for s in sizes[1:]] == [(n,) for n in a.shape[1:]], \
            f"{built.name}: {name} trailing axes should be one chunk, got {sizes[1:]}"
    for name in EPISODE_ARRAYS:
        assert g[name].metadata.dimension_names == ("episode",), f"{built.name}: {name} dims"
    assert tuple(g["frame_live"].read_chunk_sizes[0]) == lengths and g["frame_live"].dtype == np.bool_


def test_codec_chain_is_bytes_only(built: Built):
    g = _open_group(built.store)
    for name, a in g.arrays():
        assert a.compressors == (), f"{built.name}: {name} has compressors {a.compressors}"
        assert a.filters == (), f"{built.name}: {name} has filters {a.filters}"
        codecs = a.metadata.codecs
        assert len(codecs) == 1 and type(codecs[0]).__name__ == "BytesCodec", f"{built.name}: {name} codecs {codecs}"
        if a.dtype.itemsize > 1:
            assert str(getattr(codecs[0].endian, "value", codecs[0].endian)) == "little", \
                f"{built.name}: {name} endian {codecs[0].endian}"


def test_chunk_files_are_raw_little_endian_bytes(built: Built):
    ref = built.ref
    packs = ref.packs()
    for name in ref.stored:
        data = ref.frames[name]
        frame_shape = data.shape[1:]
        dtype = data.dtype.newbyteorder("<")
        for k, episodes in enumerate(packs):
            path = built.store.joinpath(name, "c", str(k), *(["0"] * len(frame_shape)))
            assert path.is_file(), f"{built.name}: chunk file {path.relative_to(built.store)} missing"
            n = int(ref.lengths[episodes].sum())
            expected_size = n * int(np.prod(frame_shape, dtype=np.int64)) * dtype.itemsize
            assert path.stat().st_size == expected_size, \
                f"{built.name}: {path.relative_to(built.store)} holds {path.stat().st_size} bytes, expected {expected_size}"
            raw = np.fromfile(path, dtype=dtype).reshape(n, *frame_shape)
            s = int(ref.starts[episodes[0]])
            assert_same_bits(raw.astype(data.dtype), data[s:s + n], f"{built.name}: raw file {name} pack {k}")
        extra = {p.name for p in (built.store / name / "c").iterdir()} - {str(k) for k in range(len(packs))}
        assert not extra, f"{built.name}: unexpected chunk folders in {name}/c: {extra}"


def test_root_zarr_json(built: Built):
    doc = _json(built.store / "zarr.json")
    assert doc["zarr_format"] == 3 and doc["node_type"] == "group"
    assert "consolidated_metadata" in doc, f"{built.name}: root zarr.json has no consolidated_metadata"
    consolidated = doc["consolidated_metadata"]["metadata"]
    assert set(consolidated) == set(built.ref.stored) | set(built.ref.videos) | set(BOOKKEEPING), \
        f"{built.name}: consolidated metadata lists {sorted(consolidated)}"
    total = int(built.ref.lengths.sum())
    frame_shapes = {name: list(built.ref.frames[name].shape[1:]) for name in built.ref.stored}
    frame_shapes.update({name: list(built.ref.info["features"][name]["shape"]) for name in built.ref.videos})
    for name in [*built.ref.stored, *built.ref.videos]:
        m = consolidated[name]
        assert m["shape"] == [total, *frame_shapes[name]], f"{built.name}: {name} shape {m['shape']}"
        assert m["dimension_names"][0] == "frame"
        assert m["chunk_grid"]["name"] == "rectilinear", f"{built.name}: {name} chunk grid {m['chunk_grid']}"
        assert m["node_type"] == "array"
    attrs = doc["attributes"]["lerobot_zarr"]
    src = built.src
    assert attrs["format_version"] == 3
    assert attrs["info"] == _json(src / "meta" / "info.json"), f"{built.name}: attrs info != meta/info.json"
    assert attrs["tasks"] == [built.ref.tasks[i] for i in range(len(built.ref.tasks))], f"{built.name}: tasks"
    if (src / "meta" / "stats.json").is_file():
        assert attrs["stats"] == _json(src / "meta" / "stats.json"), f"{built.name}: attrs stats != stats.json"
    assert attrs["source"]["kind"] == "local"
    assert Path(attrs["source"]["path"]) == src.resolve(), f"{built.name}: source path {attrs['source']}"
    assert set(attrs["features"]) == set(built.ref.stored) | set(built.ref.videos)
    n_ep = len(built.ref.lengths)
    for name, f in attrs["features"].items():
        dtype = built.ref.info["features"][name]["dtype"]
        expected_kind = dtype if dtype in ("image", "video") else "numeric"
        assert f["kind"] == expected_kind, f"{built.name}: {name} kind {f['kind']}"
        want_dtype = np.dtype("uint8") if dtype == "video" else built.ref.frames[name].dtype
        assert np.dtype(f["dtype"]) == want_dtype, f"{built.name}: {name} dtype {f['dtype']}"
        assert f["frame_shape"] == frame_shapes[name], f"{built.name}: {name} frame_shape {f['frame_shape']}"
        assert f.get("storage", "raw") == "raw", f"{built.name}: {name} storage {f.get('storage')}"
        # a video whose mp4 is missing has no committed chunk: its episodes are listed unavailable instead
        want = [] if dtype == "video" else [[0, n_ep]]
        assert f["episodes"] == want, f"{built.name}: {name} committed episodes {f['episodes']}"
    unavailable = attrs.get("unavailable", {})
    assert set(unavailable) == set(built.ref.videos), f"{built.name}: unavailable {sorted(unavailable)}"
    for name, runs in unavailable.items():  # [[first, stop, reason], ...] covering every episode, in order
        covered = [e for a, b, _ in runs for e in range(a, b)]
        assert covered == list(range(n_ep)), f"{built.name}: {name} unavailable episodes {covered}"
        assert all(isinstance(r, str) and "not found" in r and name in r for _, _, r in runs), runs
    strings = {k for k, f in built.ref.info["features"].items() if f["dtype"] == "string"}
    assert set(attrs["not_materialized"]) == strings, attrs["not_materialized"]


def test_episode_table_arrays(built: Built):
    g = _open_group(built.store)
    ref = built.ref
    assert np.array_equal(g["episode_start"][:], ref.starts)
    assert np.array_equal(g["episode_length"][:], ref.lengths)
    assert np.array_equal(g["episode_end"][:], ref.starts + ref.lengths)
    first_task = np.array([ref.frames["task_index"][s] for s in ref.starts])
    assert np.array_equal(g["episode_task_index"][:], first_task), \
        f"{built.name}: episode_task_index {g['episode_task_index'][:]} != task of each episode's frames {first_task}"
    chunk = np.concatenate([[k] * len(p) for k, p in enumerate(ref.packs())])
    assert np.array_equal(g["episode_chunk"][:], chunk), f"{built.name}: episode_chunk {g['episode_chunk'][:]}"
    assert np.array_equal(g["episode_frame"][:], ref.starts), "a store made from a source keeps episode order"
    pack_start = np.concatenate([[0], np.cumsum(ref.pack_sizes())[:-1]])
    assert np.array_equal(g["episode_offset"][:], ref.starts - pack_start[chunk])


def test_xarray_open_zarr(built: Built):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("dask")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xds = xr.open_zarr(built.store, consolidated=True)
    g = _open_group(built.store)
    lengths = built.ref.pack_sizes()
    assert "frame_live" in xds.coords and bool(xds["frame_live"].all()), "frame_live is a coordinate"
    for name in built.ref.stored:
        var = xds[name]
        assert var.dims == tuple(g[name].metadata.dimension_names), f"{built.name}: xarray dims of {name}"
        assert var.chunks[0] == lengths, f"{built.name}: dask chunks of {name} {var.chunks[0]} != {lengths}"
        assert_same_bits(var.values, built.ref.frames[name], f"{built.name}: xarray {name}")
    assert xds.attrs["lerobot_zarr"]["info"]["fps"] == built.ref.info["fps"]


@pytest.mark.parametrize("first", ["lerobot_zarr", "zarr"], ids=["lerobot_zarr-first", "zarr-first"])
def test_import_enables_rectilinear_chunks(workdir, first):
    """The package promises that importing it enables zarr's rectilinear chunks in its process, so a plain
    ``zarr.open_group(store)`` reads the store. That must hold whatever was imported before (a user's
    ``import zarr``, or pytest, whose zarr plugin imports zarr before any test module)."""
    import os
    import subprocess
    import sys

    b = _build("png", workdir)
    code = (f"import {first}\nimport lerobot_zarr, zarr\n"
            f"g = zarr.open_group({str(b.store)!r}, mode='r')\nprint(g['action'].shape)\n")
    env = {k: v for k, v in os.environ.items() if k != "ZARR_ARRAY__RECTILINEAR_CHUNKS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, (f"'import {first}; import lerobot_zarr; zarr.open_group(store)' failed:\n"
                                  + "\n".join(proc.stderr.strip().splitlines()[-4:]))
    assert proc.stdout.strip() == f"({int(b.ref.lengths.sum())}, 6)"


# ---------------------------------------------------------------------------------------------------------------
# Specific cases
# ---------------------------------------------------------------------------------------------------------------
def test_zero_episodes_are_written_not_holes(workdir):
    """All-zero actions and black frames are real data: their rows are written (not left as holes that zarr
    would skip as fill value) and flagged live."""
    b = _build("zeros", workdir)
    ref = b.ref
    g = _open_group(b.store)
    for e, name in ((2, "action"), (1, CAM)):
        s, n = int(ref.starts[e]), int(ref.lengths[e])
        assert not ref.frames[name][s:s + n].any(), f"reference: episode {e} {name} should be zero"
        pack = next(k for k, p in enumerate(ref.packs()) if e in p)
        path = b.store.joinpath(name, "c", str(pack), *(["0"] * (ref.frames[name].ndim - 1)))
        assert path.is_file(), f"pack {pack} of {name} was not written"
        assert not np.asarray(b.ds.episode(e)[name]).any()
        assert g["frame_live"][s:s + n].all()
        assert_same_bits(g[name][s:s + n], ref.frames[name][s:s + n], f"zarr read of episode {e} {name}")
    # episode 0: episode_index (and here task_index) are zero in every frame
    assert not np.fromfile(b.store / "episode_index" / "c" / "0", dtype="<i8")[:int(ref.lengths[0])].any()


@pytest.mark.parametrize("name", ["png", "jpeg", "v2.1"])
def test_image_features(workdir, name):
    b = _build(name, workdir)
    h, w, c = GENERATED[name].get("image_shape", (24, 32, 3))
    total = int(b.ref.lengths.sum())
    a = _open_group(b.store)[CAM]
    assert a.dtype == np.uint8 and a.shape == (total, h, w, c), f"{name}: image array {a.dtype} {a.shape}"
    item = b.ds[5]
    assert item[CAM].dtype == np.uint8 and item[CAM].shape == (h, w, c)
    assert_same_bits(item[CAM][None], b.ref.frames[CAM][5:6], f"{name}: ds[5] image")
    chw = open_dataset(b.store, image_format="float32_chw", progress=False)
    img = chw[5][CAM]
    assert img.dtype == np.float32 and img.shape == (c, h, w), f"{name}: float32_chw image {img.dtype} {img.shape}"
    np.testing.assert_array_equal(img, np.moveaxis(b.ref.frames[CAM][5], -1, 0).astype(np.float32) / np.float32(255))
    assert 0.0 <= img.min() and img.max() <= 1.0
    batch = chw.get_batch([0, 5, total - 1])
    assert batch[CAM].shape == (3, c, h, w) and batch[CAM].dtype == np.float32


@pytest.mark.parametrize("name", ["png", "list", "v2.1"])
def test_extra_nd_feature(workdir, name):
    b = _build(name, workdir)
    total = int(b.ref.lengths.sum())
    a = _open_group(b.store)[GRID]
    assert a.shape == (total, 3, 4) and a.dtype == np.float32, f"{name}: {GRID} {a.shape} {a.dtype}"
    assert_same_bits(a[:], b.ref.frames[GRID], f"{name}: {GRID}")
    assert b.ds[3][GRID].shape == (3, 4)


def test_list_vectors_are_variable_lists_in_source(workdir):
    """The 'list' variant really exercises pandas-style list<float> columns (guards the test itself)."""
    b = _build("list", workdir)
    files = sorted((b.src / "data").glob("*/*.parquet"))
    assert len(files) == 3
    t = pq.read_schema(files[0]).field("observation.state").type
    assert pa.types.is_list(t), f"expected list<float>, got {t}"
    assert_same_bits(b.ds.get_batch(np.arange(len(b.ds)))["observation.state"], b.ref.frames["observation.state"],
                     "list-vector dataset observation.state")


def test_generated_v21_stats_and_layout(workdir):
    b = _build("v2.1", workdir)
    assert (b.src / "meta" / "episodes.jsonl").is_file() and not (b.src / "meta" / "stats.json").exists()
    stats = b.ds.meta.stats
    state = b.ref.frames["observation.state"].astype(np.float64)
    np.testing.assert_allclose(stats["observation.state"]["mean"], state.mean(axis=0), rtol=1e-5, atol=1e-7)
    assert np.array_equal(np.asarray(stats["observation.state"]["min"]), state.min(axis=0))
    assert list(np.asarray(stats["observation.state"]["count"]).reshape(-1)) == [int(b.ref.lengths.sum())]
    assert b.ds.meta.tasks == ["a", "b", "c"]
