"""Integrity: what verification costs against a plain read of the same bytes, and what recording content hashes
costs the writes that record them. Every figure is a ratio of contenders run alternately in one process.

1. ``verify`` throughput: a store of ``--episodes`` episodes (state/action f32[14] and a 96x96 RGB camera, raw,
   ~0.5 GB by default) verified with ``lerobot_zarr.verify`` vs a plain sequential read of exactly the bytes it
   checks (each episode's rows of each feature, ``os.preadv`` into an 8 MiB buffer, the same threads), both from
   the page cache (warmed first; the machine's cache is not dropped: other processes share it). GB/s of each and
   their ratio; also verify of a compact (lossless) copy of the camera.
2. Hashing at transcode: a LeRobot folder (state/action + a 96x96 PNG camera) transcoded into fresh stores with
   hashing on and off (``--without`` patches the hash functions to constants and drops the hash columns from the
   root), alternately; median time ratio.
3. Hashing at append: ``add_episode`` of 100-frame episodes (state/action + the camera, ``durable=False``) into a
   store of ``--append-episodes`` short episodes (transcoded, with hashes on and off), alternately; median per
   append, and the size of the root (rewritten by every commit).

Run (from the repository root):  .venv/bin/python benchmarks/bench_verify.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(1, str(HERE.parent))  # the checkout, so that no PYTHONPATH is needed

import lerobot_zarr as lz  # noqa: E402
from lerobot_zarr.store import committing
from lerobot_zarr.store import hashes as store
from lerobot_zarr.store import packs as _packs
from lerobot_zarr.store.state import chunk_path, read_state  # noqa: E402
from lerobot_zarr.testing.sample_data import write_sample_dataset  # noqa: E402
from lerobot_zarr.utils import hashing as _hashing
from lerobot_zarr.writing import (
    integrity,
    transcode,
    writer,  # noqa: E402
)

CAM = "observation.images.cam"
FEATURES = {"observation.state": {"dtype": "float32", "shape": [14], "names": None},
            "action": {"dtype": "float32", "shape": [14], "names": None},
            CAM: {"dtype": "image", "shape": [96, 96, 3], "names": None}}


@contextlib.contextmanager
def without_hashing():
    """Hashing off: the hash functions return constants and the root carries no hash columns."""
    saved = [(m, "crc32c", m.crc32c) for m in (_packs, transcode, writer)]
    saved += [(_hashing.Crc32c, "update", _hashing.Crc32c.update), (store.ContentHashes, "to_json",
                                                                   store.ContentHashes.to_json),
              (committing, "root_hash", committing.root_hash)]
    for module, name, _ in saved[:3]:
        setattr(module, name, lambda data, value=0: 0)
    _hashing.Crc32c.update = lambda self, data: None
    store.ContentHashes.to_json = lambda self, table, names: {"algorithm": "crc32c", "features": {}, "files": {}}
    committing.root_hash = lambda attrs: 0
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


@contextlib.contextmanager
def hash_timer():
    """Seconds spent inside the CRC-32C function (every thread), for a share of a run that noise cannot hide."""
    spent = [0.0]
    extend = _hashing._extend

    def timed_extend(value, address, nbytes):
        start = time.perf_counter()
        try:
            return extend(value, address, nbytes)
        finally:
            spent[0] += time.perf_counter() - start

    _hashing._extend = timed_extend
    try:
        yield spent
    finally:
        _hashing._extend = extend


def plain_read(root: Path) -> int:
    """Read every committed episode's rows of every raw feature (what verify hashes), no hashing."""
    state = read_state(root)
    table = state.table
    jobs = []
    for name, spec in state.arrays.items():
        for pack in np.unique(table.chunk).tolist():
            mine = np.flatnonzero(table.chunk == pack)
            jobs.append((chunk_path(root, name, pack, spec.ndim),
                         [(int(table.offset[e]) * spec.frame_bytes, int(table.length[e]) * spec.frame_bytes)
                          for e in mine[np.argsort(table.offset[mine])]]))

    def run(job) -> int:
        path, ranges = job
        buf = np.empty(8 << 20, dtype=np.uint8)
        fd = os.open(path, os.O_RDONLY)
        total = 0
        try:
            for start, n in ranges:
                pos, stop = start, start + n
                while pos < stop:
                    got = os.preadv(fd, [memoryview(buf)[:min(len(buf), stop - pos)]], pos)
                    pos += got
                    total += got
        finally:
            os.close(fd)
        return total

    with ThreadPoolExecutor(max(1, min(integrity.decode_threads(), len(jobs)))) as pool:
        return sum(pool.map(run, jobs))


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def make_store(root: Path, episodes: int, length: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with lz.create(root, fps=30, features=FEATURES, durable=False) as ds:
        for _ in range(episodes):
            ds.add_episode({"observation.state": rng.random((length, 14), dtype=np.float32),
                            "action": rng.random((length, 14), dtype=np.float32),
                            CAM: rng.integers(0, 255, (length, 96, 96, 3), dtype=np.uint8)}, task="t")


def bench_verify(work: Path, episodes: int, repeats: int) -> None:
    root = work / "store"
    make_store(root, episodes, 200, 0)
    nbytes = plain_read(root)  # warm the page cache
    integrity.verify(root, progress=False)
    v_times, r_times = [], []
    for _ in range(repeats):
        t, report = timed(lambda: integrity.verify(root, progress=False))
        assert report.ok and report.bytes_read == nbytes, report
        v_times.append(t)
        t, got = timed(lambda: plain_read(root))
        assert got == nbytes
        r_times.append(t)
    v, r = statistics.median(v_times), statistics.median(r_times)
    print(f"1. verify of {nbytes / 1e9:.2f} GB ({episodes} episodes, raw camera): {nbytes / v / 1e9:.2f} GB/s; plain "
          f"read of the same bytes {nbytes / r / 1e9:.2f} GB/s; verify / plain read = {v / r:.2f}x time (fastest: "
          f"{min(v_times) / min(r_times):.2f}x)")
    src = work / "src"
    write_sample_dataset(src, n_episodes=max(4, episodes // 4), lengths=(150, 250), image_keys=(CAM,),
                         image_shape=(96, 96, 3), episodes_per_file=max(1, episodes // 16), seed=1)
    compact = work / "compact"
    lz.open_dataset(src, root=compact, storage={CAM: "lossless"}, progress=False)
    integrity.verify(compact, progress=False)
    times = [timed(lambda: integrity.verify(compact, progress=False)) for _ in range(repeats)]
    report = times[0][1]
    t = statistics.median(x for x, _ in times)
    print(f"   verify of a store with the camera compact (lossless): {report.bytes_read / 1e6:.0f} MB of rows and "
          f"encoded frames in {t:.2f} s = {report.bytes_read / t / 1e9:.2f} GB/s")


def bench_transcode(work: Path, episodes: int, repeats: int) -> None:
    src = work / "tsrc"
    write_sample_dataset(src, n_episodes=episodes, lengths=(150, 250), image_keys=(CAM,), image_shape=(96, 96, 3),
                         episodes_per_file=max(1, episodes // 8), seed=2)
    on, off, inside = [], [], []
    for k in range(repeats):
        for hashing in ((True, False) if k % 2 == 0 else (False, True)):
            root = work / f"t-{k}-{hashing}"
            with contextlib.nullcontext() if hashing else without_hashing(), hash_timer() as spent:
                t, _ = timed(lambda: lz.open_dataset(src, root=root, progress=False))
            (on if hashing else off).append(t)
            if hashing:
                inside.append(spent[0] / t)
            if not hashing:
                assert read_state(root).episode_hashes("action").max() < 0
            shutil.rmtree(root)
    print(f"2. transcode of {episodes} episodes (PNG camera 96x96 + state/action): with hashes "
          f"{statistics.median(on):.2f} s, without {statistics.median(off):.2f} s: "
          f"{statistics.median(on) / statistics.median(off):.3f}x (fastest: {min(on) / min(off):.3f}x); time inside "
          f"the hash function: {statistics.median(inside) * 100:.2f} % of the transcode")


def bench_append(work: Path, episodes: int, appends: int) -> None:
    src = work / "asrc"
    write_sample_dataset(src, n_episodes=episodes, lengths=(2, 3), state_dim=14, action_dim=14, image_keys=(CAM,),
                         image_shape=(96, 96, 3), episodes_per_file=max(1, episodes // 10), seed=3)
    stores = {}
    for hashing in (True, False):
        root = work / f"a-{hashing}"
        with contextlib.nullcontext() if hashing else without_hashing():
            lz.open_dataset(src, root=root, progress=False)
            stores[hashing] = writer.WritableDataset(root, durable=False)
    rng = np.random.default_rng(3)
    frames = {"observation.state": rng.random((100, 14), dtype=np.float32),
              "action": rng.random((100, 14), dtype=np.float32),
              CAM: rng.integers(0, 255, (100, 96, 96, 3), dtype=np.uint8)}
    times: dict[bool, list[float]] = {True: [], False: []}
    inside = []
    for k in range(appends):
        for hashing in ((True, False) if k % 2 == 0 else (False, True)):
            with contextlib.nullcontext() if hashing else without_hashing(), hash_timer() as spent:
                t, _ = timed(lambda: stores[hashing].add_episode(frames, task="t"))
            times[hashing].append(t)
            if hashing:
                inside.append(spent[0] / t)
    sizes = {h: (work / f"a-{h}" / "zarr.json").stat().st_size for h in (True, False)}
    state = read_state(work / "a-True")
    names = list(state.arrays)
    entry = {(len(state.packs), 0): {name: 1 for name in names}}
    bookkeeping = min(timed(lambda: (state.hashes.updated(entry), state.hashes.to_json(state.table, names)))[0]
                      for _ in range(50))
    for ds in stores.values():
        ds.close()
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"3. append of a 100-frame episode (2.8 MB) to a store of {episodes} episodes, durable=False: with hashes "
          f"{on * 1e3:.1f} ms, without {off * 1e3:.1f} ms: {on / off:.3f}x (fastest: "
          f"{min(times[True]) / min(times[False]):.3f}x; inside the hash function {statistics.median(inside) * 100:.2f} "
          f"%); root zarr.json {sizes[True] / 1e6:.2f} MB with hashes, "
          f"{sizes[False] / 1e6:.2f} MB without; the hash table's bookkeeping per commit (record one episode, "
          f"serialize {len(names)} columns): {bookkeeping * 1e3:.2f} ms, best of 50")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--episodes", type=int, default=90, help="episodes of 200 frames in the verified store")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--append-episodes", type=int, default=10_000)
    parser.add_argument("--tmp-parent", type=Path, default=HERE.parent,
                        help="where the work folder goes (default: the checkout's filesystem)")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.repeats, args.append_episodes = 10, 3, 200
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix=".bench_verify-", dir=args.tmp_parent) as tmp:
        work = Path(tmp)
        bench_verify(work, args.episodes, args.repeats)
        bench_transcode(work, max(8, args.episodes // 2), args.repeats)
        bench_append(work, args.append_episodes, 10 if args.quick else 30)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
