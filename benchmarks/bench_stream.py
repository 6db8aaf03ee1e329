"""Streaming throughput: ``lerobot_zarr.stream`` from the test Hub server vs random access ``ds[i]`` on a local store.

Serves a synthetic LeRobot v3.0 dataset (default 200 episodes of 300-700 frames, ``observation.state`` and
``action`` f32[14], 100 episodes per data file, one row group per episode, as LeRobot writes it) from the project's
Hub-compatible test server (``lerobot_zarr.testing.hub_server.HubServer`` on 127.0.0.1; the real
``huggingface_hub`` client is pointed at it by setting ``huggingface_hub.constants.ENDPOINT`` and
``HUGGINGFACE_CO_URL_TEMPLATE``, as ``tests/hub_fixtures.py`` does), and times, with the sample spec
``delta_timestamps = {"observation.state": [-1/fps, 0], "action": [k/fps for k in 0..15]}``:

- one epoch of ``stream(repo_id)`` (shuffle on, ``buffer_episodes`` 4, one rank, one worker), all samples consumed;
- the same epoch from the LeRobot folder and from the local store (where the bytes come from, everything else equal);
- random access: ``ds[i]`` over a seeded permutation of every frame of ``open_dataset(local store)``, i.e. what a
  map-style DataLoader with ``shuffle=True`` does in one epoch.

Every contender runs in its own fresh child process (the server stays in this one, so it does not share the GIL
with the consumer), contenders interleaved over ``--repeats``; best and median samples/s are printed, and the
stream/random-access ratio of the bests. Memory of a Hub stream: the child's peak RSS (``VmHWM``) above its RSS
just before streaming (reset through ``/proc/self/clear_refs``), and over the next epoch the ``tracemalloc`` peak (Python and numpy allocations) plus the
largest pyarrow pool usage seen, compared with one episode's decoded size and the whole dataset's.

Run (from the repository root):  .venv/bin/python benchmarks/bench_stream.py [--episodes 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

FPS = 30
DIM = 14
REPO = "bench/stream"


def deltas() -> dict[str, list[float]]:
    return {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(16)]}


def proc_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


# ------------------------------------------------------------------------------------------------ child side


def child(args) -> None:
    """Run one contender and print one JSON line."""
    import huggingface_hub.constants as hf_constants

    if args.endpoint:
        hf_constants.ENDPOINT = args.endpoint
        hf_constants.HUGGINGFACE_CO_URL_TEMPLATE = args.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        hf_constants.HF_HUB_DISABLE_XET = True
        hf_constants.HF_HUB_OFFLINE = False
    import numpy as np
    import pyarrow as pa

    import lerobot_zarr
    from lerobot_zarr.sampling.streams import stream

    out: dict = {"mode": args.child}
    if args.child == "random":
        ds = lerobot_zarr.open_dataset(args.store, delta_timestamps=deltas(), progress=False)
        order = np.random.default_rng(0).permutation(len(ds)).tolist()
        for i in order[:256]:  # warm-up: map the episodes' chunk files
            ds[i]
        t0 = time.perf_counter()
        for i in order:
            ds[i]
        out.update(samples=len(order), seconds=time.perf_counter() - t0)
    else:
        source = {"hub": REPO, "folder": args.src, "store": args.store}[args.source]
        # warm-up: one episode, so that one-time imports (pyarrow.compute, pandas via pyarrow, ...) are done
        list(stream(source, episodes=[0], delta_timestamps=deltas()))
        t_open = time.perf_counter()
        s = stream(source, delta_timestamps=deltas(), buffer_episodes=args.buffer_episodes, seed=0)
        out["open_seconds"] = time.perf_counter() - t_open
        if args.child == "memory":
            reset_hwm = Path("/proc/self/clear_refs")
            reset_hwm.write_text("5")  # resets VmHWM to the current RSS
            rss0 = proc_kib("VmRSS")
            n = sum(1 for _ in s)
            out.update(samples=n, rss_before_kib=rss0, hwm_kib=proc_kib("VmHWM"))
            import tracemalloc

            tracemalloc.start()
            arrow0, arrow_peak = pa.total_allocated_bytes(), 0
            n = 0
            for item in s:  # the next epoch, traced
                n += 1
                if n % 256 == 0:
                    arrow_peak = max(arrow_peak, pa.total_allocated_bytes() - arrow0)
                del item
            out.update(traced_peak=tracemalloc.get_traced_memory()[1], arrow_peak=arrow_peak)
            tracemalloc.stop()
        else:
            n = 0
            t0 = time.perf_counter()
            for item in s:
                n += 1
                del item
            out.update(samples=n, seconds=time.perf_counter() - t0)
    print(json.dumps(out))


# ------------------------------------------------------------------------------------------------ parent side


def run_child(mode: str, common: list[str], extra: list[str] = ()) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, __file__, "--child", mode, *common, *extra], env=env,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"child {mode} {extra} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--lengths", type=int, nargs=2, default=(300, 700))
    parser.add_argument("--episodes-per-file", type=int, default=100)
    parser.add_argument("--buffer-episodes", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    # child mode (internal)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--source", default="hub", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--src", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--store", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    import huggingface_hub.constants as hf_constants
    import numpy as np
    import pyarrow.parquet as pq

    import lerobot_zarr
    from lerobot_zarr.testing.hub_server import HubServer
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    with tempfile.TemporaryDirectory(prefix="bench_stream-") as tmp:
        work = Path(tmp)
        os.environ["LEROBOT_ZARR_HOME"] = str(work / "lerobot_zarr_home")
        os.environ["HF_HOME"] = str(work / "hf_home")  # children: no user token, no user cache
        t0 = time.perf_counter()
        src = write_sample_dataset(work / "src", n_episodes=args.episodes, lengths=tuple(args.lengths), fps=FPS,
                                   state_dim=DIM, action_dim=DIM, episodes_per_file=args.episodes_per_file)
        store = lerobot_zarr.open_dataset(src, root=work / "store", progress=False)
        lengths = store.meta.episode_length
        frames = int(lengths.sum())
        files = sorted((src / "data").rglob("*.parquet"))
        data_bytes = sum(p.stat().st_size for p in files)
        n_rg = sum(pq.ParquetFile(p).metadata.num_row_groups for p in files)
        frame_bytes = sum(np.dtype(s.dtype).itemsize * int(np.prod(s.frame_shape)) for s in store._specs.values())
        print(f"dataset: {args.episodes} episodes of {args.lengths[0]}-{args.lengths[1]} frames ({frames:,} frames), "
              f"state/action f32[{DIM}], {args.episodes_per_file} episodes per data file: {len(files)} data files, "
              f"{n_rg} row groups, {data_bytes / 1e6:.1f} MB parquet; decoded {frame_bytes} B/frame = "
              f"{frames * frame_bytes / 1e6:.1f} MB  (built in {time.perf_counter() - t0:.1f} s)")
        print(f"sample spec: delta_timestamps = state [-1/fps, 0], action [0..15]/fps; stream: shuffle, "
              f"buffer_episodes={args.buffer_episodes}, 1 rank x 1 worker")

        with HubServer(work / "server", host="127.0.0.1") as server:
            hf_constants.ENDPOINT = server.endpoint
            hf_constants.HUGGINGFACE_CO_URL_TEMPLATE = server.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
            server.add_repo(REPO, src, tags=["v3.0"])
            common = ["--endpoint", server.endpoint, "--src", str(src), "--store", str(store.root),
                      "--buffer-episodes", str(args.buffer_episodes)]
            contenders = {
                "stream, test Hub server": ("stream", "hub"),
                "stream, local LeRobot folder": ("stream", "folder"),
                "stream, local store": ("stream", "store"),
                "random access ds[i], local store": ("random", "store"),
            }
            results: dict[str, list[dict]] = {k: [] for k in contenders}
            hub_requests = {}
            for _ in range(args.repeats):
                for label, (mode, source) in contenders.items():
                    server.reset_stats()
                    r = run_child(mode, common, ["--source", source])
                    if source == "hub":
                        hub_requests[label] = (len(server.requests()), server.bytes_sent())
                    assert r["samples"] == frames, (label, r["samples"], frames)
                    results[label].append(r)
            print(f"\n{'contender':<42}{'best samples/s':>16}{'median':>12}{'open s':>9}{'vs ds[i]':>10}")
            ref = max(frames / r["seconds"] for r in results["random access ds[i], local store"])
            for label, rs in results.items():
                rates = [frames / r["seconds"] for r in rs]
                opened = min(r.get("open_seconds", 0.0) for r in rs)
                print(f"{label:<42}{max(rates):>16,.0f}{statistics.median(rates):>12,.0f}{opened:>9.2f}"
                      f"{max(rates) / ref:>10.2f}")
            for label, (nreq, nbytes) in hub_requests.items():
                print(f"  {label}: {nreq} requests, {nbytes / 1e6:.1f} MB sent (one child: 1-episode warm-up, "
                      f"open, one epoch; data parquet {data_bytes / 1e6:.1f} MB)")
            best_hub = max(frames / r["seconds"] for r in results["stream, test Hub server"])
            print(f"\nratio stream (test Hub server) / random access ds[i] (local store): {best_hub / ref:.2f}")

            # memory of a Hub stream
            mem = run_child("memory", common, ["--source", "hub"])
            episode_mb = int(lengths.max()) * frame_bytes / 1e6
            print(f"\nmemory of a Hub stream (buffer_episodes={args.buffer_episodes}; largest episode "
                  f"{episode_mb:.2f} MB decoded, whole dataset {frames * frame_bytes / 1e6:.1f} MB):")
            print(f"  one epoch: peak RSS (VmHWM, reset just before) {mem['hwm_kib'] / 1024:.1f} MiB, RSS before "
                  f"iterating {mem['rss_before_kib'] / 1024:.1f} MiB: "
                  f"+{(mem['hwm_kib'] - mem['rss_before_kib']) / 1024:.1f} MiB while streaming")
            peak = mem["traced_peak"] + mem["arrow_peak"]
            print(f"  next epoch under tracemalloc: traced peak {mem['traced_peak'] / 1e6:.2f} MB + pyarrow pool "
                  f"peak {mem['arrow_peak'] / 1e6:.2f} MB = {peak / 1e6:.2f} MB = {peak / 1e6 / episode_mb:.1f} "
                  f"largest episodes, {100 * peak / (frames * frame_bytes):.1f} % of the dataset")
            if server.errors:
                print(f"server errors: {server.errors}")


if __name__ == "__main__":
    main()
