"""Record episodes and train from the same store: a replay buffer for online RL that lives on disk.

An actor appends episodes (frame by frame, as a recorder would) to a ring-buffer store while a learner samples
windows from it; a fix-up pass edits and deletes data in place; the result is exported as a LeRobot dataset.

    python examples/online_buffer.py [--root DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import lerobot_zarr

FPS = 10
FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [6], "names": [f"joint_{i}" for i in range(6)]},
    "action": {"dtype": "float32", "shape": [6], "names": [f"joint_{i}" for i in range(6)]},
    "observation.images.wrist": {"dtype": "image", "shape": [48, 64, 3], "names": ["height", "width", "channels"]},
    "next.reward": {"dtype": "float32", "shape": [1], "names": None},
}


def rollout(rng: np.random.Generator, buffer: lerobot_zarr.WritableDataset, task: str) -> int:
    """One simulated episode, recorded frame by frame."""
    state = rng.normal(size=6).astype(np.float32)
    for _ in range(int(rng.integers(20, 60))):
        action = rng.normal(scale=0.1, size=6).astype(np.float32)
        image = rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
        buffer.add_frame({"observation.state": state, "action": action, "observation.images.wrist": image,
                          "next.reward": np.float32(-np.abs(state).sum())}, task=task)
        state = state + action
    return buffer.save_episode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=None, help="where to put the store (default: a temp folder)")
    args = parser.parse_args()
    work = args.root or Path(tempfile.mkdtemp(prefix="online-buffer-"))
    rng = np.random.default_rng(0)

    # a ring buffer of at most 2,000 frames: the oldest episodes go first
    with lerobot_zarr.create(work / "buffer", fps=FPS, features=FEATURES, robot_type="sim-arm",
                             capacity_frames=2_000, durable=False) as buffer:
        windows = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(8)]}
        learner = lerobot_zarr.LeRobotZarrDataset(buffer.root, delta_timestamps=windows)
        for step in range(80):
            rollout(rng, buffer, task="reach" if step % 2 else "push")
            if learner.refresh():  # the learner picks up the actor's commits when it chooses to
                batch = learner.get_batch(rng.integers(0, len(learner), size=64))
                assert batch["action"].shape == (64, 8, 6)
        print(f"buffer: {buffer.num_episodes} episodes, {len(buffer)} frames (capacity 2000), "
              f"episode_index {int(buffer[0]['episode_index'])}..{int(buffer[len(buffer) - 1]['episode_index'])}")

        # fix-ups in place: zero a glitchy action range, drop a bad episode, cut its first frames from another
        with buffer.edit(0, frames=slice(5, 10)) as ep:
            ep["action"][:] = 0
        buffer.delete_episodes([1])
        buffer.delete_frames(2, slice(0, 3))
        buffer.set_task(3, "reach carefully")
        print(f"after edits: {buffer.num_episodes} episodes, tasks {buffer.meta.tasks}")
        print(f"stats, mean reward: {buffer.meta.stats['next.reward']['mean']}")
        out = buffer.to_lerobot(work / "lerobot_v3", progress=False)
    print(f"exported as LeRobot v3.0: {out}")


if __name__ == "__main__":
    main()
