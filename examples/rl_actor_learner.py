"""Online RL with LeRobot's replay buffer on a store: an actor process adds transitions, a learner process samples.

The actor steps a toy environment (a point reaching a target, seen through a 32x32 camera) and adds each
transition to ``lerobot_zarr.rl.ReplayBuffer`` exactly as LeRobot's actor/learner code adds to LeRobot's class;
every finished episode is committed to the store, and ``checkpoint()`` commits the one in progress. The learner, in
another process, opens the same folder with ``mode="r"``, samples batches with DrQ like LeRobot's learner, fits a
small Q-function, and sees the buffer grow. At the end the buffer is reopened (everything committed is there) and
written as a LeRobot dataset.

    python examples/rl_actor_learner.py [--root DIR] [--steps 1500]   # needs torch
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import multiprocessing.synchronize
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from lerobot_zarr.rl import ReplayBuffer

CAMERA = "observation.images.top"


def observe(position: np.ndarray, target: np.ndarray) -> dict[str, torch.Tensor]:
    """The state LeRobot's processors hand to the buffer: tensors with a batch dimension of 1, the camera CHW in
    [0, 1] (made from uint8 pixels)."""
    image = np.zeros((3, 32, 32), dtype=np.uint8)
    for channel, (x, y) in ((0, position), (1, target)):
        image[channel, int(np.clip(y * 31, 0, 31)), int(np.clip(x * 31, 0, 31))] = 255
    return {"observation.state": torch.from_numpy(np.concatenate([position, target]).astype(np.float32))[None],
            CAMERA: torch.from_numpy(image)[None].float() / 255}


def actor(root: str, steps: int, stop: mp.synchronize.Event) -> None:
    """Steps the environment until told to stop (and at least ``steps`` times)."""
    rng = np.random.default_rng(0)
    with ReplayBuffer(100_000, device="cpu", root=root, fps=10) as buffer:
        position, target = rng.random(2), rng.random(2)
        state, t, step = observe(position, target), 0, 0
        while step < steps or not stop.is_set():
            step += 1
            action = np.clip(target - position + rng.normal(0, 0.1, 2), -0.2, 0.2)
            position = np.clip(position + action, 0, 1)
            next_state, t = observe(position, target), t + 1
            reached = bool(np.linalg.norm(position - target) < 0.05)
            buffer.add(state, torch.from_numpy(action.astype(np.float32))[None], float(reached) - 0.01, next_state,
                       done=reached, truncated=t == 50 and not reached,
                       complementary_info={"discrete_penalty": 0.0})
            if reached or t == 50:
                position, target = rng.random(2), rng.random(2)
                next_state, t = observe(position, target), 0
            state = next_state
            if step % 200 == 0:
                buffer.checkpoint()  # the episode in progress is committed too: a crash loses nothing added before
            time.sleep(0.002)
    print(f"actor: {step} transitions added")


def learner(root: str, seconds: float) -> None:
    buffer = ReplayBuffer(100_000, device="cpu", root=root, mode="r", refresh_interval=0.5)
    q = torch.nn.Sequential(torch.nn.Linear(4 + 2 + 3 * 32 * 32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.Adam(q.parameters(), lr=1e-3)
    while len(buffer) < 256:  # LeRobot's learner waits for online_step_before_learning transitions the same way
        time.sleep(0.05)
    steps, start, sizes = 0, time.monotonic(), []
    def q_input(state: dict, action: torch.Tensor) -> torch.Tensor:
        return torch.cat([state["observation.state"], action, state[CAMERA].flatten(1)], 1)

    for batch in buffer.get_iterator(batch_size=256, async_prefetch=True):
        with torch.no_grad():  # a toy TD target (the same action at the next state)
            target = batch["reward"] + 0.99 * (1 - batch["done"]) * q(q_input(batch["next_state"],
                                                                            batch["action"])).squeeze(1)
        loss = torch.nn.functional.mse_loss(q(q_input(batch["state"], batch["action"])).squeeze(1), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
        sizes.append(len(buffer))
        if time.monotonic() - start > seconds:
            break
    print(f"learner: {steps} updates, buffer grew from {sizes[0]} to {sizes[-1]} transitions, last loss "
          f"{loss.item():.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=None, help="buffer folder (default: a temporary one)")
    parser.add_argument("--steps", type=int, default=500, help="transitions the actor adds at least")
    parser.add_argument("--learn-seconds", type=float, default=4.0)
    args = parser.parse_args()
    root = str(args.root or Path(tempfile.mkdtemp()) / "buffer")
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    acting = ctx.Process(target=actor, args=(root, args.steps, stop))
    acting.start()
    while not (Path(root) / "zarr.json").exists():  # the store is made at the actor's first transition
        time.sleep(0.05)
    learning = ctx.Process(target=learner, args=(root, args.learn_seconds))
    learning.start()
    learning.join()
    stop.set()
    acting.join()
    reopened = ReplayBuffer(100_000, device="cpu", root=root)  # everything committed is back
    episodes = reopened.dataset.meta.total_episodes
    print(f"reopened: {len(reopened)} transitions in {episodes} episodes")
    out = reopened.to_lerobot_dataset("local/rl_example", root=Path(root).parent / "lerobot_dataset")
    print(f"written as a LeRobot dataset: {len(out)} frames at {Path(root).parent / 'lerobot_dataset'}")
    reopened.close()


if __name__ == "__main__":
    main()
