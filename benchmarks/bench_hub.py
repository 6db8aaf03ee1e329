"""The Hub as users meet it: bytes, requests and round trips of lerobot_zarr's opens, against LeRobot's own.

Every repo is served by the project's Hub-compatible test server on 127.0.0.1 and read with the real
huggingface_hub client; every dataset is laid out as LeRobot 0.6.1 writes one (episodes in data files of
``--per-file``, one row group per episode; the episode table ``meta/episodes`` in row groups of 10 episodes with
per-episode stats columns, as LeRobot's recorder flushes it). Three sections (``--sections``):

- ``rtt`` (round trips, the first open of a real Hub dataset): the server models a network (``--latency`` per
  request, one shared link of ``--gbit`` Gbit/s; ``--handshake-rtts`` more per new connection). For datasets of
  ``--scale`` episodes (default 200, 2,000, 20,000 of ``--scale-frames`` frames), a fresh process opens one
  episode: requests, round trips (requests one after the other), bytes and wall time of the open, and what it reads
  of the episode table against what opening that episode uses of it, whatever the reader (its footer, and the
  needed columns of the row groups holding the episode and where its data file begins) and, for a first open,
  against what today's store needs to be made (every episode's start, length and first task: the needed columns of
  every row group whose footer statistics do not give them; a table of varied lengths has none that do); the same
  first open reading the footer then the needed columns of every row group (the other way to read only what the
  store needs), a reopen for another episode (what an open that resolved other episodes' lengths only when needed
  would read), the dataset pushed by us (``push``: with our index file), and LeRobot's
  ``LeRobotDataset(repo_id, episodes=[k])`` when lerobot is
  importable (run with a LeRobot environment's Python).
- ``compare``: one episode of a ``--compare-episodes`` dataset of ``--compare-frames`` frames (default 2,000 of
  300-700: 400 per file), ours against LeRobot, fresh processes, ``--repeats`` interleaved runs: best and median
  wall time of the open call (imports done first: ours imports pyarrow and huggingface_hub too, which LeRobot's
  import brings), and the ratio (target <= 0.5x LeRobot's time); then again with ``--load`` CPU-bound processes
  beside it (default 2). Also the episode table's footer and the bytes of the columns an open needs. Skipped
  without lerobot.
- ``bytes`` (no network model): ``inspect``; ``open_dataset(episodes=[k])`` and of 10 more episodes against
  ``snapshot_download`` of the file holding episode k (what LeRobot downloads); a whole open against the same
  transcode from a local folder; ``inspect`` and a one-episode open of the pushed repo; a camera kept as mp4
  opened with and without read-ahead and shared blocks (bytes and requests of video range reads).

The client's once-per-process registry call (``/api/agent-harnesses``) is left out of request counts (both sides
make it). Run from the repository root:
  .venv/bin/python benchmarks/bench_hub.py [--quick]
  PYTHONPATH=. <lerobot-env>/bin/python benchmarks/bench_hub.py     # with LeRobot's rows
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import huggingface_hub.constants as hf_constants
import numpy as np
import pyarrow.parquet as pq

import lerobot_zarr
import lerobot_zarr.hub.files as hub_module
from lerobot_zarr.lerobot.source_meta import column_ranges
from lerobot_zarr.testing.hub_server import HubServer, NetworkModel
from lerobot_zarr.testing.sample_data import write_sample_dataset

NOISE = ("/api/agent-harnesses",)  # huggingface_hub's once-per-process registry fetch (both sides make it)
TOKEN = "bench-token"
ROOT = Path(__file__).resolve().parents[1]
LEROBOT_ROW_GROUP = 10  # episodes per row group of meta/episodes, as LeRobot's recorder flushes it
EPISODE_COLUMNS = ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                   "dataset_to_index")  # the columns of meta/episodes an open reads (and videos/*, none here)

# Fresh processes. "seconds": the open call, its imports done first (ours: pyarrow and huggingface_hub's top level,
# which LeRobot's import brings; whatever else the open imports, pandas or huggingface_hub's HfApi, counts);
# "with_import": the import too.
PROBE_OURS = r"""
import json, sys, time
t0 = time.perf_counter()
import huggingface_hub, pyarrow.parquet
import lerobot_zarr
repo, k, root = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t1 = time.perf_counter()
ds = lerobot_zarr.open_dataset(repo, episodes=[k], root=root, progress=False)
t2 = time.perf_counter()
assert ds.episodes.tolist() == [k] and len(ds) > 0
print(json.dumps({"seconds": t2 - t1, "with_import": t2 - t0, "frames": len(ds)}))
"""

# A first open, then every episode's length asked for (meta.episodes): the store's unresolved row groups resolved
assert "t2 = time.perf_counter()" in PROBE_OURS  # (the anchor of the replace below: a rename fails loudly)
PROBE_RESOLVE = PROBE_OURS.replace("t2 = time.perf_counter()", """\
lengths = ds.meta.episode_length
t2 = time.perf_counter()""", 1)

PROBE_LEROBOT = r"""
import json, sys, time
t0 = time.perf_counter()
from lerobot.datasets.lerobot_dataset import LeRobotDataset
repo, k, root = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t1 = time.perf_counter()
ds = LeRobotDataset(repo, episodes=[k], root=root)
t2 = time.perf_counter()
assert len(ds) > 0
print(json.dumps({"seconds": t2 - t1, "with_import": t2 - t0, "frames": len(ds)}))
"""


def have_lerobot() -> bool:
    return importlib.util.find_spec("lerobot") is not None


def lerobot_layout(folder: Path, episodes: int, frames: tuple[int, int], per_file: int, seed: int = 0,
                   tasks: int = 2) -> Path:
    """A synthetic dataset laid out as LeRobot writes one (reused when the parameters match); episode e performs
    task e % ``tasks``."""
    marker = folder.with_name(folder.name + ".json")
    params = {"episodes": episodes, "frames": list(frames), "per_file": per_file, "seed": seed, "tasks": tasks}
    if folder.exists() and marker.exists() and json.loads(marker.read_text()) == params:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    write_sample_dataset(folder, n_episodes=episodes, lengths=frames, state_dim=14, action_dim=14,
                         episodes_per_file=per_file, episodes_row_group=LEROBOT_ROW_GROUP, seed=seed,
                         tasks=("pick the cube", "place the cube", "push the cube")[:tasks])
    marker.write_text(json.dumps(params))
    print(f"  wrote a LeRobot-layout dataset of {episodes:,} episodes in {time.perf_counter() - t0:.1f} s")
    return folder


class Bench:
    def __init__(self, work: Path, args):
        self.work, self.args = work, args
        self.server = HubServer(work / "server", tokens={TOKEN: "bench"})
        self.network = NetworkModel(latency_s=args.latency, rate=args.gbit * 125e6, handshake_rtts=args.handshake_rtts)
        self.probes = 0

    def __enter__(self) -> Bench:
        self.server.start()
        hf_constants.ENDPOINT = self.server.endpoint
        hf_constants.HUGGINGFACE_CO_URL_TEMPLATE = self.server.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        self.run = self.work / f"run-{os.getpid()}"  # stores and caches of this run (datasets are reused)
        hf_constants.HF_HUB_CACHE = str(self.run / "hf_cache")
        os.environ["LEROBOT_ZARR_HOME"] = str(self.run / "lerobot_zarr_home")
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()
        shutil.rmtree(self.run, ignore_errors=True)

    def add(self, repo: str, folder: Path, *, pushed: bool = False) -> None:
        """Serve ``folder`` as ``repo``; ``pushed``: as our ``push`` publishes it (with our index file)."""
        if not pushed:
            self.server.add_repo(repo, folder, tags=["v3.0"])
            return
        local = lerobot_zarr.open_dataset(folder, root=self.run / f"local-{folder.name}", progress=False)
        local.push(repo, token=TOKEN, progress=False)
        local.close()

    def probe(self, code: str, repo: str, k: int, *, first: int | None = None) -> dict:
        """A fresh process opening episode ``k`` of ``repo`` over the modelled network: its seconds, and the
        requests, round trips and bytes the server saw (``table_bytes``: of the episode table). ``first``: another
        process opened that episode into the same store before (not measured): a reopen for another episode."""
        self.probes += 1
        tmp = self.run / f"probe-{self.probes}"
        env = dict(os.environ, HF_ENDPOINT=self.server.endpoint, HF_HOME=str(tmp / "hf"),
                   HF_LEROBOT_HOME=str(tmp / "lerobot"), LEROBOT_ZARR_HOME=str(tmp / "zarr_home"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        runs = ([first] if first is not None else []) + [k]
        for i, episode in enumerate(runs):
            measured = i == len(runs) - 1
            self.server.network = self.network if measured else None
            self.server.reset_stats()
            try:
                out = subprocess.run([sys.executable, "-c", code, repo, str(episode), str(tmp / "root")], env=env,
                                     capture_output=True, text=True, timeout=1800, check=False)
            finally:
                self.server.network = None
            if out.returncode:
                raise RuntimeError(f"probe of {repo} failed:\n{out.stderr[-3000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        records = [r for r in self.server.requests() if not any(n in r.path for n in NOISE)]
        result.update(requests=len(records), round_trips=self.server.stats.round_trips(exclude=NOISE),
                      bytes=sum(r.bytes_sent for r in records),
                      table_bytes=sum(r.bytes_sent for r in records if "/meta/episodes/" in r.path))
        shutil.rmtree(tmp, ignore_errors=True)
        return result


def section_rtt(b: Bench, args) -> None:
    lo, hi = args.scale_frames
    print(f"\n== round trips: one episode, fresh process, network {args.latency * 1e3:.0f} ms per request, "
          f"{args.gbit:g} Gbit/s shared, {args.handshake_rtts} extra round trips per new connection ==")
    print(f"(datasets of {lo}-{hi} frames per episode, {args.per_file} episodes per data file, LeRobot's layout)")
    rows = []
    for n in args.scale:
        folder = lerobot_layout(b.work / f"scale-{n}", n, (lo, hi), args.per_file, tasks=args.tasks)
        b.add(f"bench/lerobot-{n}", folder)
        b.add(f"bench/pushed-{n}", folder, pushed=True)
        table = folder / "meta/episodes/chunk-000/file-000.parquet"
        k = n // 2 + 7 if n > 20 else n // 2
        rows.append((n, "LeRobot-written, ours", b.probe(PROBE_OURS, f"bench/lerobot-{n}", k), table, [k]))
        rows.append((n, "  then meta.episodes", b.probe(PROBE_RESOLVE, f"bench/lerobot-{n}", k), table, [k]))
        again = n // 4 + 3  # another data file; its row group is not in the tail read with the footer
        rows.append((n, "  reopen for another", b.probe(PROBE_OURS, f"bench/lerobot-{n}", again, first=k), table,
                     [again]))
        rows.append((n, "pushed by us, ours", b.probe(PROBE_OURS, f"bench/pushed-{n}", k), table, [k]))
        if have_lerobot():
            rows.append((n, "LeRobot-written, LeRobot", b.probe(PROBE_LEROBOT, f"bench/lerobot-{n}", k), table,
                         [k]))
    print(f"\n{'episodes':>9}  {'repo, reader':<26}{'requests':>9}{'round trips':>12}{'bytes':>14}{'table bytes':>13}"
          f"{'uses':>12}{'':>7}{'seconds':>9}   episode table: size, footer, what locating the episode "
          f"uses of it")
    for n, label, r, table, eps in rows:
        md = pq.ParquetFile(table).metadata
        footer = md.serialized_size + 8
        uses = footer + locating_uses(table, eps)
        ratio = f"{uses:>12,}{r['table_bytes'] / uses:>6.2f}x" if "pushed" not in label else f"{'-':>12}{'':>7}"
        print(f"{n:>9,}  {label:<26}{r['requests']:>9}{r['round_trips']:>12}{r['bytes']:>14,}{r['table_bytes']:>13,}"
              f"{ratio}{r['seconds']:>9.2f}   {table.stat().st_size:,} B, "
              f"{md.num_row_groups} row groups, footer {footer:,} B, + {locating_uses(table, eps):,} B of columns")
    print("(uses: what opening the episode uses of the episode table, whatever the reader: its footer (the only way "
          "to find a column chunk of a parquet file; LeRobot's stats columns' statistics make it ~1.1 KB per "
          "episode) and the columns an open needs (episode_index, tasks, length, data/*, dataset_*_index, "
          "videos/*) of the row groups holding the episode and where its data file begins; then 'table bytes' "
          "over it (a repo pushed by us: our index file instead). A first open reads the table's footer and those "
          "row groups; the store it makes leaves the other row groups' episodes unresolved (their lengths are "
          "between LeRobot's stats columns). 'then meta.episodes': the same open, then every episode's length "
          "asked for, which resolves them (the table read whole, a commit). A reopen for another episode reads "
          "the footer and its row groups, and resolves theirs)")
    if not have_lerobot():
        print("(LeRobot's rows skipped: lerobot is not importable here)")


def locating_groups(pf: pq.ParquetFile, episodes: list[int]) -> set[int]:
    """The row groups of the episode table holding ``episodes`` and the first episode of each one's data file."""
    t = pf.read(columns=["episode_index", "data/chunk_index", "data/file_index"]).to_pydict()
    row = {e: r for r, e in enumerate(t["episode_index"])}
    pair = list(zip(t["data/chunk_index"], t["data/file_index"], strict=True))
    first_row: dict[tuple[int, int], int] = {}
    for r, p in enumerate(pair):
        first_row.setdefault(p, r)
    ends = np.cumsum([pf.metadata.row_group(g).num_rows for g in range(pf.metadata.num_row_groups)])
    rows = {r for e in episodes for r in (row[e], first_row[pair[row[e]]])}
    return {int(np.searchsorted(ends, r, side="right")) for r in rows}


def locating_uses(table: Path, episodes: list[int]) -> int:
    """The bytes of the columns an open needs (``EPISODE_COLUMNS``) in the row groups of the episode table holding
    ``episodes`` and the first episode of each one's data file (besides the footer)."""
    pf = pq.ParquetFile(table)
    groups = sorted(locating_groups(pf, episodes))
    return sum(b - a for a, b in column_ranges(pf, [c for c in EPISODE_COLUMNS if c in pf.schema_arrow.names], groups))


def section_compare(b: Bench, args) -> None:
    if not have_lerobot():
        print("\n== ours vs LeRobot: skipped (lerobot is not importable; run with a LeRobot environment's Python "
              "and this checkout on PYTHONPATH) ==")
        return
    n, (lo, hi) = args.compare_episodes, args.compare_frames
    print(f"\n== one episode of {n:,} episodes ({lo}-{hi} frames, {args.per_file} per data file, LeRobot's layout), "
          f"ours vs LeRobot, fresh processes, {args.repeats} interleaved runs ==")
    folder = lerobot_layout(b.work / f"compare-{n}", n, (lo, hi), args.per_file, tasks=args.tasks)
    repo = f"bench/compare-{n}"
    b.add(repo, folder)
    k = min(n - 1, args.per_file + 7)  # in the second data file
    table = pq.ParquetFile(folder / "meta/episodes/chunk-000/file-000.parquet")
    needed = sum(b - a for a, b in column_ranges(table, [c for c in EPISODE_COLUMNS if c in table.schema_arrow.names]))
    print(f"  episode table: {table.metadata.num_row_groups} row groups, footer {table.metadata.serialized_size:,} "
          f"bytes, the columns an open needs {needed:,} bytes in {table.metadata.num_row_groups} pieces, the file "
          f"{(folder / 'meta/episodes/chunk-000/file-000.parquet').stat().st_size:,} bytes")
    for busy in sorted({0, args.load}):
        with busy_processes(busy):
            if busy:
                print(f"  -- with {busy} CPU-bound processes beside it (load average {os.getloadavg()[0]:.1f}) --")
            compare_runs(b, args, repo, k)


@contextlib.contextmanager
def busy_processes(n: int):
    """``n`` CPU-bound processes running meanwhile (the machine another job shares)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.5 if n else 0)
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def compare_runs(b: Bench, args, repo: str, k: int) -> None:
    runs: dict[str, list[dict]] = {"ours": [], "LeRobot": []}
    for _ in range(args.repeats):
        runs["ours"].append(b.probe(PROBE_OURS, repo, k))
        runs["LeRobot"].append(b.probe(PROBE_LEROBOT, repo, k))
    for name, rs in runs.items():
        secs, total = [r["seconds"] for r in rs], [r["with_import"] for r in rs]
        print(f"  {name:<8} open best {min(secs):6.2f} s, median {statistics.median(secs):6.2f} s; with the import "
              f"best {min(total):6.2f} s; {rs[0]['requests']} requests, {rs[0]['round_trips']} round trips, "
              f"{rs[0]['bytes']:,} bytes")
    for what in ("seconds", "with_import"):
        best = min(r[what] for r in runs["ours"]) / min(r[what] for r in runs["LeRobot"])
        med = (statistics.median(r[what] for r in runs["ours"])
               / statistics.median(r[what] for r in runs["LeRobot"]))
        print(f"  ours / LeRobot, {'the open' if what == 'seconds' else 'import and open'}: {best:.2f}x (best), "
              f"{med:.2f}x (median)" + (" (target <= 0.5x)" if what == "seconds" else ""))


def section_bytes(b: Bench, args) -> None:
    print(f"\n== bytes and requests (no network model): {args.episodes} episodes, {args.episodes_per_file} per data "
          f"file, state/action f32[14] and a 32x32 PNG camera ==")
    work, server = b.run, b.server
    src = work / "bytes-src"
    write_sample_dataset(src, n_episodes=args.episodes, lengths=(300, 700), state_dim=14, action_dim=14,
                         episodes_per_file=args.episodes_per_file, image_keys=("observation.images.wrist",),
                         image_shape=(32, 32, 3), episodes_row_group=LEROBOT_ROW_GROUP)
    server.add_repo("bench/ds", src, tags=["v3.0"])
    data_bytes = sum(p.stat().st_size for p in (src / "data").rglob("*.parquet"))
    print(f"dataset: {data_bytes / 1e6:.1f} MB of data parquet")
    rows = []

    def measure(label: str, fn) -> float:
        server.reset_stats()
        t0 = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - t0
        records = [r for r in server.requests() if not any(n in r.path for n in NOISE)]
        rows.append((label, sum(r.bytes_sent for r in records), len(records), elapsed))
        return elapsed

    k = args.episodes_per_file + 7  # an episode in the middle of the second data file
    data_file = "data/chunk-000/file-001.parquet"
    md = pq.ParquetFile(src / data_file).metadata
    rg = md.row_group(k - args.episodes_per_file)
    rg_bytes = sum(rg.column(i).total_compressed_size for i in range(rg.num_columns))

    measure("inspect (metadata only)", lambda: lerobot_zarr.inspect("bench/ds"))
    measure(f"open_dataset(episodes=[{k}])",
            lambda: lerobot_zarr.open_dataset("bench/ds", episodes=[k], progress=False))
    ten = list(range(0, args.episodes, max(1, args.episodes // 10)))[:10]
    measure("open_dataset(10 episodes, new)",
            lambda: lerobot_zarr.open_dataset("bench/ds", episodes=ten, progress=False))

    from huggingface_hub import snapshot_download

    measure(f"snapshot_download(file of ep. {k} + meta)",
            lambda: snapshot_download("bench/ds", repo_type="dataset", revision="v3.0",
                                      allow_patterns=[data_file, "meta/*", "meta/**"]))
    t_hub = measure("open_dataset(all, into a new store)",
                    lambda: lerobot_zarr.open_dataset("bench/ds", root=work / "all", progress=False))
    t0 = time.perf_counter()
    local = lerobot_zarr.open_dataset(src, root=work / "local", progress=False)
    t_local = time.perf_counter() - t0

    local.push("bench/pushed", token=TOKEN, progress=False)
    meta_bytes = {repo: sum(len(server.get_file(repo, rel)) for rel in server.list_files(repo)
                            if rel.startswith("meta/")) for repo in ("bench/ds", "bench/pushed")}
    measure("pushed: inspect (our index file)", lambda: lerobot_zarr.inspect("bench/pushed"))
    measure(f"pushed: open_dataset(episodes=[{k}])",
            lambda: lerobot_zarr.open_dataset("bench/pushed", episodes=[k], progress=False))

    if args.video_episodes:
        key = "observation.images.cam"
        vsrc = write_sample_dataset(work / "vsrc", n_episodes=args.video_episodes, lengths=(60, 90),
                                    video_keys=(key,), write_videos=True, image_shape=(96, 128, 3), seed=3,
                                    episodes_row_group=LEROBOT_ROW_GROUP)
        server.add_repo("bench/video", vsrc, tags=["v3.0"])
        kv = args.video_episodes // 2
        mp4 = sum(p.stat().st_size for p in (vsrc / "videos").rglob("*.mp4"))
        read_ahead, block = hub_module._READ_AHEAD, hub_module.HubFiles.block
        variants = {"ours": lambda: None,
                    "no read-ahead": lambda: setattr(hub_module, "_READ_AHEAD", (0, 0)),
                    "no shared blocks": lambda: setattr(hub_module.HubFiles, "block", lambda self, rel, a, z:
                                                        (a, self.get(rel, a, z)))}
        for name, setup in variants.items():
            setup()
            try:
                for what, eps in ((f"episodes=[{kv}]", [kv]), ("all", None)):
                    measure(f"video {what}, {name}",
                            lambda eps=eps, root=work / f"video-{name}-{what}": lerobot_zarr.open_dataset(
                                "bench/video", episodes=eps, root=root, progress=False))
            finally:
                hub_module._READ_AHEAD, hub_module.HubFiles.block = read_ahead, block

    print(f"\n{'':<52}{'bytes':>14}{'requests':>10}{'seconds':>10}")
    for label, nbytes, nreq, secs in rows:
        print(f"{label:<52}{nbytes:>14,}{nreq:>10}{secs:>10.2f}")
    one, snap = rows[1][1], rows[3][1]
    print(f"\nepisode {k}: its row group is {rg_bytes:,} B; the whole data file {md.serialized_size:,} B "
          f"footer, {(src / data_file).stat().st_size:,} B in all")
    print(f"one-episode open / snapshot_download of its file: {one / snap:.3f} ({snap / one:.1f}x fewer bytes)")
    print(f"metadata files: {meta_bytes['bench/ds']:,} B in bench/ds (inspect served {rows[0][1]:,} B), "
          f"{meta_bytes['bench/pushed']:,} B in bench/pushed (our index included)")
    if args.video_episodes:
        print(f"video dataset: {args.video_episodes} episodes in {mp4:,} B of mp4")
    print(f"full open from the Hub vs from a local folder: {t_hub:.2f} s vs {t_local:.2f} s "
          f"({t_hub / t_local:.2f}x)")


def frames(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="rtt,compare,bytes")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request (default 0.05)")
    parser.add_argument("--gbit", type=float, default=1.0, help="shared link, Gbit/s (default 1)")
    parser.add_argument("--handshake-rtts", type=int, default=0,
                        help="round trips more for a request on a new connection (2: TCP + TLS 1.3)")
    parser.add_argument("--scale", default="200,2000,20000", help="episodes of the round-trip datasets")
    parser.add_argument("--scale-frames", type=frames, default=(30, 70), metavar="LO-HI")
    parser.add_argument("--tasks", type=int, default=2, choices=(1, 2, 3),
                        help="tasks of the datasets (episode e performs task e %% N); with 1 and frames LO-LO the "
                             "episode table's footer gives every episode's length and task (a first open reads it "
                             "as a later one)")
    parser.add_argument("--per-file", type=int, default=400, help="episodes per data file (LeRobot: ~400)")
    parser.add_argument("--compare-episodes", type=int, default=2000)
    parser.add_argument("--compare-frames", type=frames, default=(300, 700), metavar="LO-HI")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--load", type=int, default=2, help="compare again with this many CPU-bound processes "
                        "beside it (0: only on the machine as it is)")
    parser.add_argument("--episodes", type=int, default=200, help="episodes of the bytes section")
    parser.add_argument("--episodes-per-file", type=int, default=100)
    parser.add_argument("--video-episodes", type=int, default=20, help="episodes of the mp4 dataset (0: skip)")
    parser.add_argument("--quick", action="store_true", help="smaller datasets, fewer runs (a smoke run)")
    parser.add_argument("--out-dir", type=Path, default=None, help="work folder (kept; datasets reused)")
    args = parser.parse_args()
    if args.quick:
        args.scale, args.compare_episodes, args.repeats = "200,2000", 400, 2
        args.episodes, args.episodes_per_file, args.video_episodes = 40, 20, 4
    args.scale = [int(n) for n in args.scale.split(",") if n]
    warnings.filterwarnings("ignore")
    print(f"bench_hub: python {sys.version.split()[0]}, lerobot_zarr {lerobot_zarr.__version__}, lerobot "
          f"{'importable' if have_lerobot() else 'not importable'}; load average {os.getloadavg()}")
    work = args.out_dir or Path(tempfile.mkdtemp(prefix="bench_hub-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        with Bench(work, args) as b:
            sections = {"rtt": section_rtt, "compare": section_compare, "bytes": section_bytes}
            for name in args.sections.split(","):
                sections[name](b, args)
    finally:
        if args.out_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nload average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
