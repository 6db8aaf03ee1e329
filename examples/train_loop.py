"""A training-loop shaped use of lerobot_zarr: random batches of windows, as a diffusion/ACT policy samples them.

    python examples/train_loop.py [SOURCE]      (SOURCE: a LeRobot folder, a store or a Hub repo id; default: a
                                                generated dataset)

The state and action features are found by name (LeRobot's ``observation.state`` / ``action``, or another
dataset's ``state`` / ``actions``...); each batch holds the state at t-1 and t and the actions t..t+15.
"""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import lerobot_zarr
from lerobot_zarr.testing.sample_data import write_sample_dataset


def vector_feature(meta: lerobot_zarr.DatasetMeta, preferred: str, word: str) -> str:
    """``preferred`` if the dataset has it, else its first numeric vector feature whose name contains ``word``."""
    features = meta.features
    if preferred in features:
        return preferred
    vectors = [k for k, ft in features.items() if ft["dtype"] not in ("image", "video", "string")
               and len(ft.get("shape") or []) == 1 and ft["shape"][0] > 1]
    named = [k for k in vectors if word in k.lower()]
    if not named:
        raise SystemExit(f"train_loop: no {word} feature in {list(features)}")
    return named[0]


def main() -> None:
    if len(sys.argv) > 1:
        source, root = sys.argv[1], None  # a folder or repo is transcoded once into the cache, reused after
    else:
        tmp = Path(tempfile.mkdtemp(prefix="lerobot_zarr-example-"))  # kept: delete it when done
        source, root = write_sample_dataset(tmp / "src", n_episodes=50, lengths=(200, 400)), tmp / "store"
    meta = lerobot_zarr.inspect(source)  # metadata only: which features, at what fps
    fps = meta.fps
    state, action = vector_feature(meta, "observation.state", "state"), vector_feature(meta, "action", "action")
    ds = lerobot_zarr.open_dataset(
        source, root=root, delta_timestamps={state: [-1 / fps, 0.0], action: [k / fps for k in range(16)]}
    )
    print(ds)
    stats = ds.meta.stats.get(action, {})
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for step in range(200):
        batch = ds.get_batch(rng.integers(0, len(ds), 256))
        if step == 0 and not {"mean", "std"} <= set(stats):  # a dataset without stats.json: from a first batch
            stats = {"mean": batch[action].mean(axis=(0, 1)), "std": batch[action].std(axis=(0, 1))}
        # normalise with the dataset's stats, as a policy would
        mean = np.asarray(stats["mean"], dtype=np.float32)
        std = np.asarray(stats["std"], dtype=np.float32)
        actions = (batch[action] - mean) / (std + 1e-8)
        valid = ~batch[f"{action}_is_pad"]
    dt = time.perf_counter() - t0
    print(f"200 batches of 256: {dt:.2f} s; last batch {state} {batch[state].shape}, {action} {actions.shape}, "
          f"{valid.mean():.1%} not padded")


if __name__ == "__main__":
    main()
