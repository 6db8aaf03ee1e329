"""Object storage: stores and LeRobot folders in a bucket, against the same data on local disk, interleaved.

The S3 server is moto's behind the test network model (``lerobot_zarr.testing.s3_server``), in a process of its
own, at ``--latency`` (20 ms) per request and one shared link of ``--gbit`` (1 Gbit/s). Sections (``--sections``):

- ``engines``: obstore and s3fs (fsspec) on the same server: import, one range, 256 ranges at once, a whole
  object; wall time and this process's CPU per call (what chose obstore);
- ``open``: the first batch (get_batch(256), windows) after ``open_dataset("s3://...")`` of a 100,000-episode
  store, in a fresh process (imports excluded), and the root's size;
- ``numeric``: get_batch(256) with windows, steady state, bucket vs local (best of ``--repeats``);
- ``cameras``: a 224x224 camera (jpeg and raw storage), 2-frame windows, get_batch(64) with the next
  ``--lookahead`` batches prefetched, each contender in a fresh process over fresh random samples: samples/s,
  bytes fetched / bytes the samples use, peak resident memory;
- ``epochs``: the same cameras over ``--epochs`` whole epochs (every sample once, in a new order), local, in the
  bucket, and in the bucket with a cache of 1.5x the camera (held row by row), interleaved: the first epoch (a first
  read: samples/s, ratio to local, and the share of the link's bound, its rate over the camera's bytes per
  sample) and the later ones (the steady state, from the local cache);
- ``workers``: ``--workers`` processes reading the same raw camera batches at once against one: bytes across the
  link (the mirror is shared by the processes of a machine);
- ``forked``: the same raw 224x224 camera batches read by the process that opened the store and by a process
  forked from it (a DataLoader worker as Linux starts it: its requests go through a fetcher process of its own),
  each over a fresh mirror, interleaved: seconds to the first batch and samples/s;
- ``lerobot``: one episode of a LeRobot-written folder in the bucket (``--lerobot-version``: v3.0, or v2.1 with
  its file per episode) opened in a fresh process: requests, round trips, bytes, at 200, 2,000 and 20,000
  episodes; then the same first open in this process against a server of
  its own holding each answer until the client has sent all it can without it (``settle``): the round trips by
  dependency, which a loaded machine's delayed client thread cannot lengthen;
- ``sync``: a publication SIGKILLed at random points ``--kills`` times (each time the bucket must read as its last
  commit, exactly), then completed; ``--races`` pairs of concurrent publications from the same base (exactly one
  commit wins, whole).

Figures are printed, never asserted; the script raises only when a value read from the bucket differs from the
local store's, or a kill leaves a commit half visible.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lerobot_zarr  # noqa: E402
from lerobot_zarr.testing.sample_data import write_sample_dataset  # noqa: E402
from lerobot_zarr.writing.sync import push_store  # noqa: E402

FPS = 30
CAM = "observation.images.cam"
DELTAS = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(16)]}


class Server:
    """The S3 server in a process of its own (its CPU is not this one's), with the network model."""

    def __init__(self, latency: float, gbit: float):
        self.proc = subprocess.Popen([sys.executable, "-m", "lerobot_zarr.testing.s3_server", "--bucket", "bench",
                                      "--latency", str(latency), "--rate", str(gbit * 125e6)],
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                     env=dict(os.environ, PYTHONPATH=str(ROOT)))
        self.env = {}
        for line in self.proc.stdout:
            if line.strip() == "ready":
                break
            key, _, value = line.strip().partition("=")
            self.env[key] = value
        os.environ.update(self.env)
        self.endpoint = self.env["AWS_ENDPOINT_URL"]

    def stats(self) -> dict:
        with urllib.request.urlopen(self.endpoint + "/__stats", timeout=30) as r:
            return json.loads(r.read())

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(self.endpoint + "/__reset", method="POST"), timeout=30).read()

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def load() -> str:
    return open("/proc/loadavg").read().split()[0]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ------------------------------------------------------------------------------------------------ engines
def section_engines(server: Server, args) -> None:
    print(f"\n== engines: obstore vs s3fs, {args.latency * 1e3:.0f} ms per request, {args.gbit:g} Gbit/s (load "
          f"{load()}) ==")
    t = time.perf_counter()
    import obstore
    from obstore.store import S3Store
    t_obstore = time.perf_counter() - t
    try:
        t = time.perf_counter()
        import s3fs
        t_s3fs = time.perf_counter() - t
    except ImportError:
        print("s3fs is not installed (the bench extra): obstore alone")
        s3fs = None
    env = server.env
    store = S3Store("bench", endpoint=env["AWS_ENDPOINT_URL"], client_options={"allow_http": True})
    size, frame = 8 << 20, 150528
    for k in range(8):
        obstore.put(store, f"engines/pack{k}", os.urandom(size), use_multipart=False)
    rng = np.random.default_rng(0)

    def obs_one():
        return len(obstore.get_range(store, "engines/pack0", start=0, length=frame))

    def obs_whole():
        return len(obstore.get(store, "engines/pack1").bytes())

    def obs_batch(paths, starts):
        async def go():
            got = await asyncio.gather(*[obstore.get_range_async(store, p, start=s, length=frame)
                                         for p, s in zip(paths, starts, strict=True)])
            return sum(len(b) for b in got)
        return asyncio.run(go())

    contenders = {"obstore": (obs_one, obs_whole, obs_batch)}
    if s3fs is not None:
        fs = s3fs.S3FileSystem(endpoint_url=env["AWS_ENDPOINT_URL"], key=env["AWS_ACCESS_KEY_ID"],
                               secret=env["AWS_SECRET_ACCESS_KEY"], client_kwargs={"region_name": "us-east-1"})
        contenders["s3fs"] = (lambda: len(fs.cat_file("bench/engines/pack0", start=0, end=frame)),
                              lambda: len(fs.cat_file("bench/engines/pack1")),
                              lambda paths, starts: sum(len(b) for b in fs.cat_ranges(
                                  [f"bench/{p}" for p in paths], starts, [s + frame for s in starts])))
    rows = {name: {} for name in contenders}
    for label, reps in (("one 150 KB range", 15), ("256 ranges of 150 KB at once", 4), ("an 8 MiB object", 4)):
        for name, fns in contenders.items():  # warm
            fns[0]()
        for _ in range(reps):
            paths = [f"engines/pack{k}" for k in rng.integers(0, 8, 256)]
            starts = (rng.integers(0, size // frame - 1, 256) * frame).tolist()
            for name, (one, whole, batch) in contenders.items():
                c0, t0 = cpu(), time.perf_counter()
                if label.startswith("one"):
                    one()
                elif label.startswith("256"):
                    batch(paths, starts)
                else:
                    whole()
                rows[name].setdefault(label, []).append((time.perf_counter() - t0, cpu() - c0))
    print(f"import: obstore {t_obstore * 1e3:.0f} ms" + (f", s3fs {t_s3fs * 1e3:.0f} ms" if s3fs else ""))
    for label in rows["obstore"]:
        line = f"{label:<30}"
        for name in contenders:
            wall = np.median([w for w, _ in rows[name][label]])
            c = np.median([c for _, c in rows[name][label]])
            line += f"  {name}: {wall * 1e3:8.1f} ms wall, {c * 1e3:6.1f} ms CPU"
        print(line)


# ------------------------------------------------------------------------------------------------ stores
def build_numeric(work: Path, episodes: int, lengths: tuple[int, int]) -> Path:
    src = work / f"numeric-{episodes}"
    if not (src / "meta" / "info.json").is_file():
        t = time.perf_counter()
        write_sample_dataset(src, n_episodes=episodes, lengths=lengths, fps=FPS, state_dim=14, action_dim=14,
                             episodes_per_file=max(1, episodes // 5), seed=1)
        print(f"  wrote a LeRobot dataset of {episodes:,} episodes in {time.perf_counter() - t:.0f} s")
    store = work / f"numeric-{episodes}.store"
    if not (store / "zarr.json").is_file():
        lerobot_zarr.open_dataset(src, root=store, progress=False)
    return store


def publish(store: Path, name: str) -> str:
    url = f"s3://bench/stores/{name}"
    t = time.perf_counter()
    report = push_store(store, url, progress=False)
    print(f"  published {name}: {len(report.uploaded)} files, {report.uploaded_bytes / 1e6:.0f} MB in "
          f"{time.perf_counter() - t:.1f} s")
    return url


FIRST_BATCH = r"""
import json, resource, sys, time
import numpy as np
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t0 = time.perf_counter()
import lerobot_zarr
t1, c1 = time.perf_counter(), cpu()
ds = lerobot_zarr.open_dataset(sys.argv[1], delta_timestamps=json.loads(sys.argv[2]))
t2, c2 = time.perf_counter(), cpu()
batch = ds.get_batch(np.random.default_rng(int(sys.argv[3])).integers(0, len(ds), 256))
t3, c3 = time.perf_counter(), cpu()
remote = ds._remote
print(json.dumps({"import": t1 - t0, "open": t2 - t1, "first_batch": t3 - t2, "total": t3 - t1,
                  "cpu_open": c2 - c1, "cpu_batch": c3 - c2,
                  "episodes": ds.meta.total_episodes, "requests": remote.requests if remote else 0,
                  "fetched": remote.fetched_bytes if remote else 0}))
"""


def fresh(code: str, *argv: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=1800,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), LEROBOT_ZARR_HOME=os.environ["LEROBOT_ZARR_HOME"]))
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def section_open(server: Server, args, work: Path) -> None:
    store = build_numeric(work, args.open_episodes, (10, 30))
    url = publish(store, f"numeric-{args.open_episodes}")
    print(f"\n== first batch after open, {args.open_episodes:,}-episode store, fresh process (load {load()}) ==")
    root = (store / "zarr.json").stat().st_size
    for rep in range(args.repeats_open):
        server.reset()
        remote = fresh(FIRST_BATCH, url, json.dumps(DELTAS), str(rep))
        stats = server.stats()
        local = fresh(FIRST_BATCH, str(store), json.dumps(DELTAS), str(rep))
        print(f"  run {rep}: bucket open {remote['open']:.2f} s + first batch {remote['first_batch']:.2f} s = "
              f"{remote['total']:.2f} s (CPU {remote['cpu_open']:.2f} + {remote['cpu_batch']:.2f} s; until then "
              f"{remote['requests']} requests, {remote['fetched'] / 1e6:.1f} MB "
              f"after the open's one request for the root and the listing, the root {root / 1e6:.1f} MB; the process, "
              f"with the background fetch it ended: "
              f"{stats['requests']} requests, {stats['round_trips']} round trips) | local {local['total']:.3f} s | "
              f"load {load()}")
    requests, trips = first_batch_by_dependency(store, args, work)
    print(f"  by dependency: the open and the first batch in {trips} round trips ({requests} requests; load {load()})")


def first_batch_by_dependency(store: Path, args, work: Path) -> tuple[int, int]:
    """The open and first batch of ``store`` published to an S3 server in this process whose answers settle (each
    held until no other thread of the process runs or waits to): its requests, and its round trips by dependency
    (the waves the client waits for, which neither a loaded machine nor the server's CPU lengthens)."""
    from lerobot_zarr.testing.hub_network import NetworkModel
    from lerobot_zarr.testing.s3_server import S3Server

    saved = dict(os.environ)
    try:
        with S3Server() as server:
            server.create_bucket("bench-dependency-open")
            os.environ.update(server.client_env(), LEROBOT_ZARR_HOME=str(work / f"home-{time.monotonic_ns()}"))
            url = "s3://bench-dependency-open/store"
            push_store(store, url, progress=False)
            server.reset_stats()
            server.network = NetworkModel(latency_s=args.latency, rate=args.gbit * 125e6, settle=True)
            ds = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
            ds._remote._numeric_started = True  # (the whole packs it fetches after, in the background: not counted)
            ds.get_batch(np.random.default_rng(0).integers(0, len(ds), 256))
            counted = len(server.requests()), server.stats.round_trips()
            server.network = None
            ds._remote.close()  # (its background fetch of whole packs ends here)
            return counted
    finally:
        os.environ.clear()
        os.environ.update(saved)


def section_numeric(server: Server, args, work: Path) -> None:
    store = build_numeric(work, args.numeric_episodes, (300, 700) if args.numeric_episodes <= 2000 else (10, 30))
    url = publish(store, f"numeric-{args.numeric_episodes}")
    print(f"\n== numeric get_batch(256) with windows, steady state (load {load()}) ==")
    local = lerobot_zarr.open_dataset(store, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    rng = np.random.default_rng(0)
    remote.get_batch(rng.integers(0, len(local), 256))
    t = time.perf_counter()
    while not all(p.complete for (name, _), p in remote._remote._packs.items() if p.numeric) or \
            len([p for p in remote._remote._packs.values() if p.numeric]) < sum(
                int((remote._remote.state.packs.rows > 0).sum()) for s in remote.array_specs.values()
                if s.kind == "numeric"):
        time.sleep(0.2)
        if time.perf_counter() - t > 600:
            raise RuntimeError("the numeric packs were not fetched in 10 minutes")
    print(f"  numeric packs whole after {time.perf_counter() - t:.1f} s in the background "
          f"({remote._remote.fetched_bytes / 1e6:.0f} MB)")
    for _ in range(32):  # (the batches settle a feature the background fetch could not: they look every 16)
        remote.get_batch(rng.integers(0, len(local), 256))
    numeric = {name for name, spec in remote.array_specs.items() if spec.kind == "numeric"}
    print(f"  held whole: {sorted(numeric & remote._remote.settled) == sorted(numeric)}")
    times = {"local": [], "bucket": []}
    cpus = {"local": [], "bucket": []}
    for _ in range(args.repeats):
        idx = [rng.integers(0, len(local), 256) for _ in range(args.batches)]
        for name, ds in (("local", local), ("bucket", remote)):
            t0, c0 = time.perf_counter(), time.process_time()
            for i in idx:
                ds.get_batch(i)
            times[name].append(time.perf_counter() - t0)
            cpus[name].append(time.process_time() - c0)
    check = rng.integers(0, len(local), 256)
    a, b = remote.get_batch(check), local.get_batch(check)
    for key in b:
        if not ((a[key] == b[key]) if key == "task" else np.array_equal(a[key], b[key])):
            raise AssertionError(f"bucket and local differ in {key}")
    n = 256 * args.batches
    rate = {k: n / min(v) for k, v in times.items()}
    cpu_rate = {k: n / min(v) for k, v in cpus.items()}
    print(f"  local {rate['local']:,.0f} samples/s, bucket {rate['bucket']:,.0f} samples/s: "
          f"{rate['bucket'] / rate['local']:.2f}x local (best of {args.repeats}); per CPU second (the process's): "
          f"local {cpu_rate['local']:,.0f}, bucket {cpu_rate['bucket']:,.0f} samples = "
          f"{cpu_rate['bucket'] / cpu_rate['local']:.2f}x (load {load()})")


CAMERA_RUN = r"""
import json, resource, sys, time
import numpy as np
import lerobot_zarr
source, lookahead, batches, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
deltas = {"observation.images.cam": [-1 / 30, 0.0]}
ds = lerobot_zarr.open_dataset(source, delta_timestamps=deltas)
rng = np.random.default_rng(seed)
plan = [rng.choice(len(ds), 64, replace=False) for _ in range(batches + lookahead)]
ds.get_batch(plan[0][:2])  # open costs apart
for k in range(1, 1 + lookahead):
    ds.prefetch(plan[k])
remote = ds._remote
fetched0 = remote.fetched_by.get("observation.images.cam", 0) if remote else 0
t0 = time.perf_counter()
used = set()  # the frames asked for: read, or prefetched (the last lookahead batches are never read)
for k in range(batches + lookahead):
    k_sel, idx = ds._sel.locate_k(plan[k][:2] if k == 0 else plan[k])
    local = idx + ds._ktab[k_sel][:, 0]  # the frame inside its episode
    eps = ds._sel.episodes[k_sel]
    used.update(zip(eps.tolist(), local.tolist()))
    used.update(zip(eps.tolist(), np.maximum(local - 1, 0).tolist()))  # the window's first frame (clamped)
for k in range(1, batches):
    if k + lookahead < len(plan):
        ds.prefetch(plan[k + lookahead])
    batch = ds.get_batch(plan[k])
elapsed = time.perf_counter() - t0
fetched1 = remote.fetched_by.get("observation.images.cam", 0) if remote else 0
spec = ds.array_specs["observation.images.cam"]
table = ds._state.table
def used_bytes(e, f):  # the bytes of the frame as stored (a jpeg's encoded size)
    if spec.storage == "raw" or remote is None:
        return spec.frame_bytes
    pack = remote._packs.get(("observation.images.cam", int(table.chunk[e])))
    return int(pack.index[int(table.offset[e]) + f, 1]) if pack is not None else 0
with open("/proc/self/status") as fh:
    vm = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in fh) if k in ("VmRSS", "VmHWM")}
print(json.dumps({"samples_per_s": 64 * (batches - 1) / elapsed, "rss_kib": vm["VmRSS"], "hwm_kib": vm["VmHWM"],
                  "elapsed": elapsed, "fetched_timed": fetched1 - fetched0,
                  "fetched": remote.fetched_by.get("observation.images.cam", 0) if remote else 0,
                  "requests": remote.requests if remote else 0,
                  "used_bytes": sum(used_bytes(e, f) for e, f in used), "storage": spec.storage}))
"""


def camera_source(args, work: Path) -> Path:
    """The LeRobot folder of the camera sections (``--camera-episodes`` episodes of a 224x224 jpeg camera), made
    once per work folder."""
    src = work / f"camera-src-{args.camera_episodes}"
    if not (src / "meta" / "info.json").is_file():
        write_sample_dataset(src, n_episodes=args.camera_episodes, lengths=(90, 110), image_keys=(CAM,),
                             image_shape=(224, 224, 3), image_format="jpeg", seed=2)
    return src


def raw_camera_store(args, work: Path) -> tuple[Path, str]:
    """The camera sections' store with the camera kept raw, made once, and its URL in the bucket (published)."""
    store = work / f"camera-raw-{args.camera_episodes}.store"
    if not (store / "zarr.json").is_file():
        lerobot_zarr.open_dataset(camera_source(args, work), root=store, storage={CAM: "raw"}, progress=False)
    return store, publish(store, f"camera-raw-{args.camera_episodes}")


def camera_stores(src: Path, args, work: Path):
    """The jpeg (when simplejpeg is installed) and raw stores of the camera source, each on local disk and
    published to the bucket: ``(storage, local store, bucket url)``."""
    for storage in ("jpeg", "raw"):
        if storage == "jpeg":
            try:
                import simplejpeg  # noqa: F401
            except ImportError:
                print("  jpeg: skipped (simplejpeg is not installed)")
                continue
        store = work / f"camera-{storage}-{args.camera_episodes}.store"
        if not (store / "zarr.json").is_file():
            lerobot_zarr.open_dataset(src, root=store, storage={CAM: storage}, progress=False)
        yield storage, store, publish(store, f"camera-{storage}-{args.camera_episodes}")


def section_cameras(server: Server, args, work: Path) -> None:
    print(f"\n== 224x224 camera, 2-frame windows, get_batch(64), {args.lookahead} batches prefetched ahead "
          f"(load {load()}) ==")
    src = camera_source(args, work)
    for storage, store, url in camera_stores(src, args, work):
        runs = {"local": [], "bucket": []}
        for rep in range(args.repeats_cameras):
            for name, source in (("local", str(store)), ("bucket", url)):
                runs[name].append(fresh(CAMERA_RUN, source, str(args.lookahead if name == "bucket" else 0),
                                        str(args.camera_batches), str(100 + rep)))
        best_local = max(r["samples_per_s"] for r in runs["local"])
        best_bucket = max(r["samples_per_s"] for r in runs["bucket"])
        b = max(runs["bucket"], key=lambda r: r["samples_per_s"])
        used = b["used_bytes"]
        rss_local = max(r["rss_kib"] for r in runs["local"])
        rss_bucket = max(r["rss_kib"] for r in runs["bucket"])
        hwm_local = max(r["hwm_kib"] for r in runs["local"])
        hwm_bucket = max(r["hwm_kib"] for r in runs["bucket"])
        link = args.gbit * 125e6  # bytes/s: one link shared by every connection (testing.hub_network.Link)
        rate = b["fetched_timed"] / b["elapsed"]
        # the ceiling of a first read: every frame a sample's window reads crosses the link once (the frames of
        # every batch of the plan, the prefetched ones after the last timed batch too, over its samples)
        per_sample = used / (2 + 64 * (args.camera_batches + args.lookahead - 1))
        ceiling = link / per_sample
        print(f"  {storage}: local {best_local:,.0f} samples/s, bucket {best_bucket:,.0f} samples/s = "
              f"{best_bucket / best_local:.2f}x local; the link-bound ceiling {ceiling / best_local:.2f}x local "
              f"({link / 1e6:.0f} MB/s over {per_sample / 1e3:.0f} KB per sample as stored = {ceiling:,.0f} "
              f"samples/s), so {best_bucket / ceiling:.0%} of it; while timed the camera took {rate / 1e6:.0f} MB/s "
              f"of the link ({rate / link:.0%}); camera bytes fetched {b['fetched'] / 1e6:.1f} MB for "
              f"{used / 1e6:.1f} MB of frames asked for (as stored) = {b['fetched'] / max(used, 1):.2f}x "
              f"({b['requests']} requests); resident memory at the end {rss_bucket / 1024:.0f} MiB vs "
              f"{rss_local / 1024:.0f} MiB = {rss_bucket / rss_local:.2f}x, peak {hwm_bucket / 1024:.0f} vs "
              f"{hwm_local / 1024:.0f} MiB = {hwm_bucket / hwm_local:.2f}x (load {load()})")


EPOCHS_RUN = r"""
import json, sys, time
import numpy as np
import lerobot_zarr
source, (lookahead, seed, epochs, cache) = sys.argv[1], (int(a) for a in sys.argv[2:6])
cam = "observation.images.cam"
ds = lerobot_zarr.open_dataset(source, delta_timestamps={cam: [-1 / 30, 0.0]},
                               **({"cache_bytes": cache} if cache else {}))
rng = np.random.default_rng(seed)
ds.get_batch([0])  # open costs apart
remote = ds._remote
out = []
for epoch in range(epochs):  # every sample once per epoch, in a new order, batches of 64 (the last one short)
    plan = np.array_split(rng.permutation(len(ds)), -(-len(ds) // 64))
    fetched = remote.fetched_by.get(cam, 0) if remote else 0
    t0, c0 = time.perf_counter(), time.process_time()
    for k in range(1, 1 + lookahead):
        ds.prefetch(plan[k])
    for k, idx in enumerate(plan):
        if k + lookahead + 1 < len(plan):
            ds.prefetch(plan[k + lookahead + 1])
        ds.get_batch(idx)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0  # (cpu: every thread of the process)
    now = remote.fetched_by.get(cam, 0) if remote else 0
    out.append({"samples_per_s": len(ds) / elapsed, "seconds": elapsed, "cpu": cpu, "fetched": now - fetched})
stored = 0  # the camera's bytes as stored (every frame is read in an epoch): what a first read must fetch
if remote:
    for (name, _), pack in remote._packs.items():
        if name == cam:
            stored += pack.nbytes(np.flatnonzero(~pack.empty))
print(json.dumps({"epochs": out, "samples": len(ds), "stored": stored,
                  "held_whole": bool(remote and cam in remote.settled)}))
"""


def section_epochs(server: Server, args, work: Path) -> None:
    """224x224 windows (jpeg and raw storage) over whole epochs, each contender in a fresh process, interleaved:
    the first epoch is a first read (every frame crosses the link once: bound by the link for raw frames), the
    later ones the steady state of training over many epochs, from the local cache: held whole when the camera fits
    in half of it (the default 8 GiB), and with a cache of 1.5x the camera (held, but row by row: pinned)."""
    print(f"\n== 224x224 camera, 2-frame windows, {args.epochs} epochs, get_batch(64), {args.lookahead} batches "
          f"ahead, {args.repeats_cameras} runs interleaved (load {load()}) ==")
    link = args.gbit * 125e6  # bytes/s: one link shared by every connection (testing.hub_network.Link)
    src = camera_source(args, work)
    for storage, store, url in camera_stores(src, args, work):
        camera = sum(f.stat().st_size for f in (store / CAM).rglob("*") if f.is_file())
        pinned_cache = max(1 << 20, int(1.5 * camera))
        contenders = {"local": (str(store), 0, 0), "bucket": (url, args.lookahead, 0),
                      "bucket, cache 1.5x the camera": (url, args.lookahead, pinned_cache)}
        runs = {name: [] for name in contenders}
        for rep in range(args.repeats_cameras):
            for name, (source, lookahead, cache) in contenders.items():
                os.environ["LEROBOT_ZARR_HOME"] = str(work / f"home-epochs-{time.monotonic_ns()}")
                r = fresh(EPOCHS_RUN, source, str(lookahead), str(7 + rep), str(args.epochs), str(cache))
                r["load"] = load()
                runs[name].append(r)
        n = runs["local"][0]["samples"]
        first = {name: max(r["epochs"][0]["samples_per_s"] for r in rs) for name, rs in runs.items()}
        # the steady state of a run: its later epochs together (each is short: apart, a loaded machine's noise)
        steady = {name: max(n * len(r["epochs"][1:]) / sum(e["seconds"] for e in r["epochs"][1:]) for r in rs)
                  for name, rs in runs.items()}
        cpu = {name: min(sum(e["cpu"] for e in r["epochs"][1:]) / (n * len(r["epochs"][1:])) for r in rs)
               for name, rs in runs.items()}  # CPU seconds a sample
        b = runs["bucket"][0]
        per_sample = b["stored"] / b["samples"]
        bound = link / per_sample
        loads = ", ".join(r["load"] for rs in runs.values() for r in rs)
        print(f"  {storage} ({b['samples']:,} samples, camera {b['stored'] / 1e6:.1f} MB as stored, "
              f"{per_sample / 1e3:.1f} KB a sample in an epoch):")
        print(f"    first read (epoch 1): local {first['local']:,.0f}, bucket {first['bucket']:,.0f} samples/s = "
              f"{first['bucket'] / first['local']:.2f}x local; the link's bound {bound:,.0f} samples/s "
              f"({link / 1e6:.0f} MB/s over {per_sample / 1e3:.1f} KB), reached at {first['bucket'] / bound:.0%}; "
              f"camera bytes fetched {b['epochs'][0]['fetched'] / 1e6:.1f} MB")
        for name in ("bucket", "bucket, cache 1.5x the camera"):
            r = runs[name][0]
            later = sum(e["fetched"] for e in r["epochs"][1:])
            print(f"    steady state (epochs 2-{args.epochs}), {name}: {steady[name]:,.0f} vs local "
                  f"{steady['local']:,.0f} samples/s = {steady[name] / steady['local']:.2f}x local; CPU "
                  f"{cpu[name] * 1e6:.0f} vs {cpu['local'] * 1e6:.0f} us a sample = {cpu['local'] / cpu[name]:.2f}x "
                  f"local's samples per CPU second (camera held whole: {r['held_whole']}; {later / 1e6:.1f} MB "
                  f"fetched after epoch 1)")
        print(f"    best of {args.repeats_cameras} runs each; every run: " + "; ".join(
            f"{name} " + " / ".join(f"{e['samples_per_s']:,.0f}" for e in r["epochs"])
            for name, rs in runs.items() for r in rs) + f" samples/s by epoch (load {loads})")


WORKER_RUN = r"""
import json, sys, time
import numpy as np
import lerobot_zarr
source, batches, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ds = lerobot_zarr.open_dataset(source, delta_timestamps={"observation.images.cam": [-1 / 30, 0.0]})
rng = np.random.default_rng(seed)
plan = [rng.choice(len(ds), 64, replace=False) for _ in range(batches)]
t0 = time.perf_counter()
for k, idx in enumerate(plan):
    if k + 1 < len(plan):
        ds.prefetch(plan[k + 1])
    ds.get_batch(idx)
fetched = ds._remote.fetched_by.get("observation.images.cam", 0)
print(json.dumps({"seconds": time.perf_counter() - t0, "fetched": fetched}))
"""


def section_workers(server: Server, args, work: Path) -> None:
    """Processes of one machine reading the same batches of a raw camera (DataLoader workers, ranks of a node): the
    mirror is shared, so the bytes crossing the link are those of one process, not of each."""
    print(f"\n== {args.workers} processes reading the same raw 224x224 batches at once (load {load()}) ==")
    _, url = raw_camera_store(args, work)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for n in (1, args.workers):
        server.reset()
        env["LEROBOT_ZARR_HOME"] = str(work / f"home-workers-{n}-{time.monotonic_ns()}")
        t = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", WORKER_RUN, url, str(args.camera_batches), "11"],
                                  stdout=subprocess.PIPE, text=True, env=env) for _ in range(n)]
        outs = [json.loads(p.communicate(timeout=1800)[0].strip().splitlines()[-1]) for p in procs]
        wall = time.perf_counter() - t
        stats = server.stats()
        fetched = sum(o["fetched"] for o in outs)
        print(f"  {n} process{'es' if n > 1 else ''}: the link carried {stats['bytes_sent'] / 1e6:.1f} MB in "
              f"{stats['requests']} requests (the processes fetched {fetched / 1e6:.1f} MB between them); "
              f"{wall:.1f} s for all, reading {max(o['seconds'] for o in outs):.1f} s at most (load {load()})")


def _read_plan(ds, plan) -> dict:
    """Read the batches of ``plan`` (each with the next one prefetched): the first batch's and the total seconds."""
    t0 = time.perf_counter()
    first = None
    for k, idx in enumerate(plan):
        if k + 1 < len(plan):
            ds.prefetch(plan[k + 1])
        ds.get_batch(idx)
        first = time.perf_counter() - t0 if first is None else first
    return {"first": first, "seconds": time.perf_counter() - t0}


def _read_plan_in_fork(ds, plan, out) -> None:
    out.put(_read_plan(ds, plan))


def section_forked(server: Server, args, work: Path) -> None:
    import multiprocessing
    import warnings

    print(f"\n== a raw 224x224 camera read in the process that opened the store and in a fork of it (load {load()}) ==")
    _, url = raw_camera_store(args, work)
    ctx = multiprocessing.get_context("fork")
    rows: dict[str, list[dict]] = {"parent": [], "forked": []}
    for rep in range(args.repeats_cameras):
        for mode in ("parent", "forked"):
            os.environ["LEROBOT_ZARR_HOME"] = str(work / f"home-forked-{mode}-{time.monotonic_ns()}")
            ds = lerobot_zarr.open_dataset(url, delta_timestamps={CAM: [-1 / FPS, 0.0]})
            ds.get_batch(np.arange(2))  # this process's engine runs: a fork cannot use one
            rng = np.random.default_rng(100 + rep)
            plan = [rng.choice(len(ds), 64, replace=False) for _ in range(args.camera_batches)]
            if mode == "parent":
                rows[mode].append(_read_plan(ds, plan))
            else:
                out = ctx.Queue()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    proc = ctx.Process(target=_read_plan_in_fork, args=(ds, plan, out))
                    proc.start()
                rows[mode].append(out.get(timeout=1800))
                proc.join(timeout=60)
            ds._remote.close()
    after = 64 * (args.camera_batches - 1)  # samples after the first batch (which waits for the fetcher's start)
    best = {mode: min(r["seconds"] - r["first"] for r in runs) for mode, runs in rows.items()}
    for mode, runs in rows.items():
        print(f"  {mode:>7}: first batch {min(r['first'] for r in runs):.2f} s, then {after / best[mode]:,.0f} "
              f"samples/s (best of {len(runs)}; load {load()})")
    print(f"  forked / parent after the first batch: {best['parent'] / best['forked']:.2f}x samples/s")


ONE_EPISODE = r"""
import json, sys, time
t0 = time.perf_counter()
import lerobot_zarr
t1 = time.perf_counter()
ds = lerobot_zarr.open_dataset(sys.argv[1], episodes=[int(sys.argv[2])], progress=False)
print(json.dumps({"seconds": time.perf_counter() - t1, "frames": len(ds)}))
"""


def section_lerobot(server: Server, args, work: Path) -> None:
    version = args.lerobot_version
    print(f"\n== one episode of a LeRobot-written {version} folder in the bucket, fresh process (load {load()}) ==")
    from lerobot_zarr.cloud.client import Bucket

    for n in args.lerobot_scale:
        folder = work / f"lerobot-{version}-{n}"
        if not (folder / "meta" / "info.json").is_file():
            layout = dict(episodes_per_file=400, episodes_row_group=10) if version == "v3.0" else {}
            write_sample_dataset(folder, version=version, n_episodes=n, lengths=(30, 70), state_dim=14, action_dim=14,
                                 seed=3, **layout)
        url = f"s3://bench/lerobot-{version}/{n}"
        bucket = Bucket(url)
        if bucket.head("meta/info.json") is None:
            upload(folder, bucket)
        os.environ["LEROBOT_ZARR_HOME"] = str(work / f"home-{n}-{time.monotonic_ns()}")
        server.reset()
        r = fresh(ONE_EPISODE, url, str(n // 2 + 7 if n > 20 else n // 2))
        s = server.stats()
        print(f"  {n:>7,} episodes: {s['requests']} requests, {s['round_trips']} round trips, "
              f"{s['bytes_sent'] / 1e6:.1f} MB, {r['seconds']:.2f} s (load {load()})")
    for n in args.lerobot_scale:
        requests, trips = round_trips_by_dependency(work / f"lerobot-{version}-{n}", n, args, work)
        print(f"  {n:>7,} episodes, by dependency: {requests} requests, {trips} round trips (load {load()})")


def upload(folder: Path, bucket) -> None:
    """Every file of ``folder`` into ``bucket`` (a :class:`~lerobot_zarr.cloud.client.Bucket`), 16 at a time."""
    from concurrent.futures import ThreadPoolExecutor

    rels = [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file()]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda rel: bucket.write(rel, (folder / rel).read_bytes()), rels))


def round_trips_by_dependency(folder: Path, n: int, args, work: Path) -> tuple[int, int]:
    """A first open of one episode of ``folder`` against an S3 server in this process whose answers settle (each
    held until no other thread of the process runs or waits to): its requests, and its round trips by dependency."""
    from lerobot_zarr.cloud.client import Bucket
    from lerobot_zarr.testing.hub_network import NetworkModel
    from lerobot_zarr.testing.s3_server import S3Server

    saved = dict(os.environ)
    try:
        with S3Server() as server:
            server.create_bucket(f"bench-dependency-{n}")  # (moto keeps its buckets for the process)
            os.environ.update(server.client_env())
            url = f"s3://bench-dependency-{n}/lerobot"
            upload(folder, Bucket(url))
            server.reset_stats()
            server.network = NetworkModel(latency_s=args.latency, rate=args.gbit * 125e6, settle=True)
            lerobot_zarr.open_dataset(url, episodes=[n // 2 + 7 if n > 20 else n // 2],
                                      root=work / f"dependency-{n}-{time.monotonic_ns()}", progress=False)
            server.network = None
            return len(server.requests()), server.stats.round_trips()
    finally:
        os.environ.clear()
        os.environ.update(saved)


PUSH = ("import sys\nfrom lerobot_zarr.writing.sync import push_store\n"
        "push_store(sys.argv[1], sys.argv[2], progress=False, on_file=lambda rel: print(rel, flush=True))\n"
        "print('DONE', flush=True)\n")


def section_sync(server: Server, args, work: Path) -> None:
    print(f"\n== sync killed {args.kills} times at random points, then completed; {args.races} races (load "
          f"{load()}) ==")
    src = work / "sync-src-30"
    if not (src / "meta" / "info.json").is_file():
        write_sample_dataset(src, n_episodes=30, lengths=(20, 40), image_keys=(CAM,), seed=4)
    store = work / f"sync-{time.monotonic_ns()}"
    small = 1 << 12  # an episode per pack: many files to publish, many places to be killed at
    lerobot_zarr.open_dataset(src, root=store, progress=False, pack_bytes=small)
    url = f"s3://bench/sync/{store.name}"
    push_store(store, url, progress=False)
    before = work / f"{store.name}-before"
    shutil.copytree(store, before, ignore=shutil.ignore_patterns(".lock", ".sync"))
    full = lerobot_zarr.open_dataset(src, root=work / f"{store.name}-full", progress=False, pack_bytes=small)
    with lerobot_zarr.open_dataset(store, mode="r+") as w:  # twenty more episodes
        for e in range(20):
            ep = full.episode(e)
            w.add_episode({k: np.asarray(ep[k]) for k in ("observation.state", "action", CAM)}, task=f"t{e}")
    rng = np.random.default_rng(5)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    old, new = lerobot_zarr.open_dataset(before), lerobot_zarr.open_dataset(store)
    commits = {len(old): old, len(new): new}  # by frames
    kills, landed, t, done = 0, [], time.perf_counter(), False
    while kills < args.kills and not done:
        proc = subprocess.Popen([sys.executable, "-c", PUSH, str(store), url], stdout=subprocess.PIPE, text=True,
                                env=env)
        stop_after, seen = int(rng.integers(0, 5)), 0
        while seen < stop_after:
            line = proc.stdout.readline().strip()
            if not line or line == "DONE":
                break
            seen += 1
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        remote = lerobot_zarr.open_dataset(url)
        n = len(remote)
        if n not in commits:
            raise AssertionError(f"kill {kills + 1}: a commit is half visible ({n} frames)")
        idx = np.arange(n)
        a, b = remote.get_batch(idx), commits[n].get_batch(idx)
        if not all(np.array_equal(a[k], b[k]) if k != "task" else a[k] == b[k] for k in b):
            raise AssertionError(f"kill {kills + 1}: the bucket's commit of {n} frames reads otherwise")
        done = n == len(new)  # killed after its root was written: complete
        kills += not done
        landed.append(seen)
    report = push_store(store, url, progress=False)
    remote = lerobot_zarr.open_dataset(url)
    ok = len(remote) == len(new)
    print(f"  {kills} kills (after {landed} files reported uploaded): the bucket read as its last commit each "
          f"time, exactly; then completed ({len(report.uploaded)} files left to upload, {len(report.skipped)} there "
          f"already): {'the new commit whole' if ok else 'WRONG'} ({time.perf_counter() - t:.0f} s)")
    wins = []
    for race in range(args.races):
        base = work / f"race-{race}-{time.monotonic_ns()}"
        lerobot_zarr.open_dataset(src, root=base, progress=False)
        rurl = f"s3://bench/race/{base.name}"
        push_store(base, rurl, progress=False)
        stores = []
        for name, e in (("a", 6), ("b", 9)):
            shutil.copytree(base, base.with_name(base.name + name), ignore=shutil.ignore_patterns(".lock"))
            with lerobot_zarr.open_dataset(base.with_name(base.name + name), mode="r+") as w:
                ep = full.episode(e)
                w.add_episode({k: np.asarray(ep[k]) for k in ("observation.state", "action", CAM)}, task=name)
            stores.append(base.with_name(base.name + name))
        procs = [subprocess.Popen([sys.executable, "-c", PUSH, str(s), rurl], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, env=env) for s in stores]
        errs = [p.communicate()[1] for p in procs]
        ok = [p.returncode == 0 for p in procs]
        if sum(ok) != 1 or not all(o or "CommitConflictError" in e for o, e in zip(ok, errs, strict=True)):
            raise AssertionError(f"race {race}: {ok}\n{errs}")
        winner = stores[ok.index(True)]
        got, want = lerobot_zarr.open_dataset(rurl), lerobot_zarr.open_dataset(winner)
        idx = np.arange(len(want))
        a, b = got.get_batch(idx), want.get_batch(idx)
        if len(got) != len(want) or not all(np.array_equal(a[k], b[k]) if k != "task" else a[k] == b[k] for k in b):
            raise AssertionError(f"race {race}: the bucket does not hold the winner's commit whole")
        wins.append("ab"[ok.index(True)])
    print(f"  {args.races} races of two publications from one base: one won each time ({''.join(wins)}), the "
          f"other refused (CommitConflictError), the bucket held the winner's commit whole")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="engines,open,numeric,cameras,epochs,workers,forked,lerobot,sync")
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--gbit", type=float, default=1.0)
    parser.add_argument("--open-episodes", type=int, default=100_000)
    parser.add_argument("--numeric-episodes", type=int, default=2000)
    parser.add_argument("--camera-episodes", type=int, default=20)
    parser.add_argument("--camera-batches", type=int, default=20)
    parser.add_argument("--lookahead", type=int, default=4)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--lerobot-scale", type=lambda s: [int(x) for x in s.split(",")], default=[200, 2000, 20000])
    parser.add_argument("--lerobot-version", choices=("v3.0", "v2.1"), default="v3.0")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--repeats-open", type=int, default=3)
    parser.add_argument("--repeats-cameras", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=6, help="epochs of the epochs section (the first: a first read)")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--races", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small shapes: a smoke run")
    parser.add_argument("--out-dir", type=Path, default=None, help="work folder (kept and reused)")
    args = parser.parse_args()
    if args.quick:
        args.open_episodes, args.numeric_episodes, args.camera_episodes = 20_000, 200, 6
        args.lerobot_scale, args.kills, args.races, args.repeats = [200, 2000], 5, 2, 3
    work = args.out_dir or Path(tempfile.mkdtemp(prefix="bench_object_store-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LEROBOT_ZARR_HOME", str(work / f"home-{os.getpid()}"))
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    server = Server(args.latency, args.gbit)
    print(f"S3 server (moto) at {server.endpoint}: {args.latency * 1e3:.0f} ms per request, {args.gbit:g} Gbit/s "
          f"shared; work folder {work}; load {load()}")
    try:
        for section in args.sections.split(","):
            {"engines": lambda: section_engines(server, args), "open": lambda: section_open(server, args, work),
             "numeric": lambda: section_numeric(server, args, work),
             "cameras": lambda: section_cameras(server, args, work),
             "epochs": lambda: section_epochs(server, args, work),
             "workers": lambda: section_workers(server, args, work),
             "forked": lambda: section_forked(server, args, work),
             "lerobot": lambda: section_lerobot(server, args, work),
             "sync": lambda: section_sync(server, args, work)}[section]()
    finally:
        server.close()
        if args.out_dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
