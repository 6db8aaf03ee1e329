"""Bytes and requests at a Hub: lerobot_zarr's inspect and per-episode opens vs snapshot_download.

Serves a synthetic LeRobot v3.0 dataset (LeRobot's layout: several episodes per data file, one row group per
episode) from the project's Hub-compatible test server on 127.0.0.1, and counts at the server what each way of
getting at it transfers, in the same run:

- ``lerobot_zarr.inspect(repo_id)``: metadata only;
- ``open_dataset(repo_id, episodes=[k])`` and ``episodes=[10 episodes]``: footers + the row groups asked for;
- ``snapshot_download(allow_patterns=[the data file holding episode k, "meta/*"])``, what LeRobotDataset does for
  ``episodes=[k]`` (it downloads the whole file holding the episode, into the Hub cache);
- ``open_dataset(repo_id)`` for everything, timed against the same transcode from a local folder;
- the same store pushed back with ``push`` (so the repo holds our index file ``meta/lerobot_zarr_index.json``):
  ``inspect`` and a one-episode open of that repo;
- a camera kept as mp4 (AV1, all episodes in one file): a one-episode and a whole open decode its frames from the
  Hub through our file object (read-ahead from 64 KiB doubling to 8 MiB, blocks shared by the readers of a file),
  and again without read-ahead (every read of the decoder one request) and without the shared blocks.

Run (from the repository root):  .venv/bin/python benchmarks/bench_hub.py [--episodes 200]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import huggingface_hub.constants as hf_constants
import pyarrow.parquet as pq

import lerobot_zarr
import lerobot_zarr.hub as hub_module
from lerobot_zarr.sample_data import write_sample_dataset
from lerobot_zarr.testing.hub_server import HubServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--episodes-per-file", type=int, default=100)
    parser.add_argument("--video-episodes", type=int, default=20, help="episodes of the mp4 dataset (0: skip)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_hub-") as tmp:
        work = Path(tmp)
        src = write_sample_dataset(work / "src", n_episodes=args.episodes, lengths=(300, 700), state_dim=14,
                                   action_dim=14, episodes_per_file=args.episodes_per_file,
                                   image_keys=("observation.images.wrist",), image_shape=(32, 32, 3))
        os.environ["LEROBOT_ZARR_HOME"] = str(work / "lerobot_zarr_home")
        with HubServer(work / "server", tokens={"bench-token": "bench"}) as server:
            hf_constants.ENDPOINT = server.endpoint
            hf_constants.HUGGINGFACE_CO_URL_TEMPLATE = server.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
            hf_constants.HF_HUB_CACHE = str(work / "hf_cache")
            server.add_repo("bench/ds", src, tags=["v3.0"])
            data_bytes = sum(p.stat().st_size for p in (src / "data").rglob("*.parquet"))
            print(f"dataset: {args.episodes} episodes, {args.episodes_per_file} per data file, "
                  f"{data_bytes / 1e6:.1f} MB of data parquet (state/action f32[14], a 32x32 PNG camera)")
            rows = []

            def measure(label: str, fn) -> float:
                server.reset_stats()
                t0 = time.perf_counter()
                fn()
                elapsed = time.perf_counter() - t0
                rows.append((label, server.bytes_sent(), len(server.requests()), elapsed))
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

            local.push("bench/pushed", token="bench-token", progress=False)
            meta_bytes = {repo: sum(len(server.get_file(repo, rel)) for rel in server.list_files(repo)
                                    if rel.startswith("meta/")) for repo in ("bench/ds", "bench/pushed")}
            measure("pushed: inspect (our index file)", lambda: lerobot_zarr.inspect("bench/pushed"))
            measure(f"pushed: open_dataset(episodes=[{k}])",
                    lambda: lerobot_zarr.open_dataset("bench/pushed", episodes=[k], progress=False))

            if args.video_episodes:
                key = "observation.images.cam"
                vsrc = write_sample_dataset(work / "vsrc", n_episodes=args.video_episodes, lengths=(60, 90),
                                            video_keys=(key,), write_videos=True, image_shape=(96, 128, 3), seed=3)
                server.add_repo("bench/video", vsrc, tags=["v3.0"])
                kv = args.video_episodes // 2
                mp4 = sum(p.stat().st_size for p in (vsrc / "videos").rglob("*.mp4"))
                read_ahead, block = hub_module._READ_AHEAD, hub_module.HubFiles.block
                variants = {"ours": lambda: None,
                            "no read-ahead": lambda: setattr(hub_module, "_READ_AHEAD", (0, 0)),
                            "no shared blocks": lambda: setattr(hub_module.HubFiles, "block", lambda self, rel, a, b:
                                                                (a, self.get(rel, a, b)))}
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
            one = rows[1][1]
            snap = rows[3][1]
            print(f"\nepisode {k}: its row group is {rg_bytes:,} B; the whole data file {md.serialized_size:,} B "
                  f"footer, {(src / data_file).stat().st_size:,} B in all")
            print(f"one-episode open / snapshot_download of its file: {one / snap:.3f} "
                  f"({snap / one:.1f}x fewer bytes)")
            print(f"metadata files: {meta_bytes['bench/ds']:,} B in bench/ds (inspect served {rows[0][1]:,} B), "
                  f"{meta_bytes['bench/pushed']:,} B in bench/pushed (our index included)")
            if args.video_episodes:
                print(f"video dataset: {args.video_episodes} episodes in {mp4:,} B of mp4")
            print(f"full open from the Hub vs from a local folder: {t_hub:.2f} s vs {t_local:.2f} s "
                  f"({t_hub / t_local:.2f}x)")


if __name__ == "__main__":
    main()
