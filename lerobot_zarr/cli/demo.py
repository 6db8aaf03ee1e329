"""The main job, offline, in under a minute: a LeRobot dataset on a Hub (the project's test Hub, started on
127.0.0.1), inspected remotely, opened partly, sampled against the speed floor, edited and extended in place,
pushed back and reopened from the Hub with its round trip checked. Figures are printed as ratios.

``lerobot-zarr demo`` runs it. Its sample dataset writer (pyarrow, Pillow) is imported when it runs, not when the
command line is parsed."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..api import inspect, open_dataset
from ..testing.baseline import FlatMemmapSampler

if TYPE_CHECKING:
    from ..testing.hub_server import HubServer

__all__ = ["add_parser", "run", "run_demo"]

REPO = "demo/pick-place"
PUSHED = "demo/pick-place-edited"
TOKEN = "demo-token"  # the embedded Hub's own token: nothing leaves 127.0.0.1
CAMERA = "observation.images.wrist"
FPS = 30
SHAPE = (24, 32, 3)
PER_FILE = 25


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``demo`` command and its options."""
    demo = subparsers.add_parser("demo", parents=[common],
                                 help="the whole job offline: a test Hub on 127.0.0.1, inspect, partial download, "
                                      "sampling speed, edits, push and reopen")
    demo.add_argument("--dir", type=Path, default=None, help="an empty or new work folder (default: a temporary one)")
    demo.add_argument("--episodes", type=int, default=100, help="episodes in the generated dataset (default 100)")
    return demo


def run(args: argparse.Namespace) -> int:
    run_demo(args.dir, n_episodes=args.episodes)
    return 0


def _best_us(fn: Callable[[], object], n: int, repeats: int = 5) -> float:
    """Best of ``repeats`` runs of ``fn()`` (which does ``n`` samples), in µs per sample."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def _kb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} KB"


def run_demo(work_dir: Path | None = None, *, n_episodes: int = 100) -> None:
    """Print each step; the work folder is temporary unless ``work_dir`` (new or empty) is given."""
    if work_dir is not None:
        work_dir = Path(work_dir)
        if work_dir.exists() and any(work_dir.iterdir()):
            raise SystemExit(f"lerobot-zarr demo: {work_dir} is not empty; give a new or empty folder")
        work_dir.mkdir(parents=True, exist_ok=True)
        _run(work_dir.resolve(), n_episodes)
        return
    with tempfile.TemporaryDirectory(prefix="lerobot_zarr-demo-") as tmp:
        _run(Path(tmp), n_episodes)


@contextlib.contextmanager
def _local_hub(work: Path) -> Iterator[HubServer]:
    """The embedded Hub on 127.0.0.1 with huggingface_hub pointed at it, and caches inside ``work``; every
    setting is restored afterwards."""
    from huggingface_hub import constants
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    from ..testing.hub_server import HubServer

    settings = {"HF_HUB_OFFLINE": False, "HF_HUB_DISABLE_XET": True, "HF_HUB_DISABLE_TELEMETRY": True,
                "HF_HOME": str(work / "hf_home"), "HF_HUB_CACHE": str(work / "hf_home" / "hub"),
                "HF_TOKEN_PATH": str(work / "hf_home" / "token")}
    env = {"LEROBOT_ZARR_HOME": str(work / "cache"), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    saved = {k: getattr(constants, k) for k in [*settings, "ENDPOINT", "HUGGINGFACE_CO_URL_TEMPLATE"]}
    saved_env = {k: os.environ.get(k) for k in [*env, "HF_TOKEN", "HF_ENDPOINT"]}
    bars_were_off = are_progress_bars_disabled()
    with HubServer(work / "hub_storage", tokens={TOKEN: "demo"}) as server:
        try:
            disable_progress_bars()
            for k, v in settings.items():
                setattr(constants, k, v)
            constants.ENDPOINT = server.endpoint
            constants.HUGGINGFACE_CO_URL_TEMPLATE = server.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
            os.environ.update(env)
            os.environ.pop("HF_TOKEN", None)
            os.environ.pop("HF_ENDPOINT", None)
            yield server
        finally:
            if not bars_were_off:
                enable_progress_bars()
            for k, v in saved.items():
                setattr(constants, k, v)
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _files_bytes(folder: Path, rels: set[str] | None = None) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*")
               if p.is_file() and (rels is None or p.relative_to(folder).as_posix() in rels))


def _run(work: Path, n_episodes: int) -> None:
    from ..testing.sample_data import write_sample_dataset

    t_start = time.perf_counter()
    source = work / "lerobot_dataset"
    print(f"1. a LeRobot v3.0 dataset: {n_episodes} episodes of 100-250 frames at {FPS} fps, state/action f32[14], "
          f"a 24x32 PNG camera, {PER_FILE} episodes per data file")
    t0 = time.perf_counter()
    write_sample_dataset(source, n_episodes=n_episodes, lengths=(100, 250), fps=FPS, state_dim=14, action_dim=14,
                         image_keys=(CAMERA,), image_shape=SHAPE, episodes_per_file=PER_FILE, seed=0)
    repo_bytes = _files_bytes(source)
    print(f"   {_kb(repo_bytes)} written in {time.perf_counter() - t0:.1f} s")

    with _local_hub(work) as hub:
        hub.add_repo(REPO, source, tags=["v3.0"])
        print(f"2. served on an embedded Hub at {hub.endpoint} as {REPO} (the real huggingface_hub client talks "
              f"to it; no network)")

        hub.reset_stats()
        meta = inspect(REPO)
        read = hub.bytes_sent()
        print(f"3. inspect('{REPO}'): {meta.total_episodes} episodes, {meta.total_frames:,} frames, features "
              f"{list(meta.features)[:3]}..., tasks {meta.tasks}")
        print(f"   read {_kb(read)} = {read / repo_bytes:.2%} of the repo's {_kb(repo_bytes)} (metadata only)")

        picked = [3, n_episodes // 2, n_episodes - 2]
        hub.reset_stats()
        part = open_dataset(REPO, episodes=picked, root=work / "partial_store", progress=False)
        read = hub.bytes_sent()
        files = {f"data/chunk-000/file-{e // PER_FILE:03d}.parquet" for e in picked}
        whole = _files_bytes(source, files)
        print(f"4. open_dataset('{REPO}', episodes={picked}): {len(part):,} frames in a local store")
        print(f"   read {_kb(read)} = {read / whole:.1%} of the {len(files)} data files that hold them "
              f"({_kb(whole)}; LeRobot downloads whole files): {whole / read:.1f}x fewer bytes")

        deltas = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(16)]}
        store = work / "store"
        t0 = time.perf_counter()
        ds = open_dataset(REPO, root=store, delta_timestamps=deltas, progress=False)
        elapsed = time.perf_counter() - t0
        size = _files_bytes(store)
        print(f"5. the whole dataset into its own store ({store.name}/): {_kb(size)} in {elapsed:.1f} s; "
              f"sampling with windows state t-1..t, action t..t+15:")
        item = ds[int(ds.meta.episode_start[1])]
        shown = ", ".join(f"{k} {tuple(getattr(v, 'shape', ()))}" for k, v in item.items()
                          if k in ("observation.state", "action", "action_is_pad", CAMERA, "task"))
        print(f"   ds[i]: {shown}")
        _speed(ds, deltas, work)

        print("6. edit in place and record a new episode (open_dataset(store, mode='r+')):")
        before = np.array(ds.episode(5)["action"])
        with open_dataset(store, mode="r+") as w:
            with w.edit(5, frames=slice(10, 20)) as ep:
                ep["action"][:] = 0.0
            n_new = 200
            rng = np.random.default_rng(1)
            new_episode = {"observation.state": rng.normal(size=(n_new, 14)).astype(np.float32),
                           "action": rng.normal(size=(n_new, 14)).astype(np.float32),
                           CAMERA: rng.integers(0, 255, (n_new, *SHAPE), dtype=np.uint8)}
            new_index = w.add_episode(new_episode, task="wave at the camera")
        after = open_dataset(store, progress=False)
        got = after.episode(5)["action"]
        if not (np.array_equal(got[10:20], 0 * got[10:20]) and np.array_equal(got[:10], before[:10])
                and np.array_equal(got[20:], before[20:])):
            raise RuntimeError("demo: the in-place edit is not what was written")
        print(f"   episode 5 frames 10-19: action zeroed; episode {new_index} appended ({n_new} frames, new task); "
              f"now {after.meta.total_episodes} episodes, {len(after):,} frames")

        hub.reset_stats()
        t0 = time.perf_counter()
        commit = after.push(PUSHED, token=TOKEN, commit_message="edit episode 5, add a waving episode",
                            progress=False)
        uploaded = sum(r.bytes_received for r in hub.requests())
        print(f"7. push('{PUSHED}'): commit {str(commit)[:12]} in {time.perf_counter() - t0:.1f} s, "
              f"{_kb(uploaded)} uploaded as LeRobot v3.0")

        hub.reset_stats()
        back = open_dataset(PUSHED, root=work / "reopened", token=TOKEN, progress=False)
        idx = np.arange(len(after))
        a, b = after.get_batch(idx), back.get_batch(idx)
        same = [k for k in a if k != "task" and np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes()]
        differ = [k for k in a if k != "task" and k not in same]
        if differ or a["task"] != b["task"]:
            raise RuntimeError(f"demo: the reopened dataset differs from the pushed store in {differ or ['task']}")
        print(f"8. reopened from the Hub: {back.meta.total_episodes} episodes, {len(back):,} frames, every value of "
              f"{len(same)} features and the task strings equal to the edited store (read {_kb(hub.bytes_sent())})")
    print(f"done in {time.perf_counter() - t_start:.1f} s")


def _speed(ds, deltas: dict, work: Path) -> None:
    floor_dir = work / "flat_memmap_reference"
    frames = {name: np.concatenate([np.asarray(ep[name]) for ep in map(ds.episode, range(ds.meta.total_episodes))])
              for name in ds.array_specs}
    FlatMemmapSampler.write(floor_dir, frames, ds.meta.episode_start, ds.meta.episode_length,
                            ds.meta.tasks, ds.meta.fps)
    floor = FlatMemmapSampler(floor_dir, deltas)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(ds), 2000)
    batches = [rng.integers(0, len(ds), 256) for _ in range(20)]
    for name in ("action", "observation.state_is_pad", CAMERA):
        if not np.array_equal(ds.get_batch(idx[:64])[name], floor.get_batch(idx[:64])[name]):
            raise RuntimeError(f"demo: {name} differs between lerobot_zarr and the reference sampler")
    ours_item = _best_us(lambda: [ds[int(i)] for i in idx], len(idx))
    floor_item = _best_us(lambda: [floor[int(i)] for i in idx], len(idx))
    ours_batch = _best_us(lambda: [ds.get_batch(b) for b in batches], 256 * len(batches))
    floor_batch = _best_us(lambda: [floor.get_batch(b) for b in batches], 256 * len(batches))
    print("   speed (best of 5, warm page cache) against a hand-written flat np.memmap sampler (the floor):")
    print(f"   {'':<22}{'lerobot_zarr':>14}{'flat memmap':>14}{'ratio':>8}")
    print(f"   {'ds[i]  µs/sample':<22}{ours_item:>14.1f}{floor_item:>14.1f}{ours_item / floor_item:>7.2f}x")
    print(f"   {'get_batch µs/sample':<22}{ours_batch:>14.3f}{floor_batch:>14.3f}{ours_batch / floor_batch:>7.2f}x")
