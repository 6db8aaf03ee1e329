"""Record a dataset at 30 fps from a fake arm and fake cameras with LeRobot's recording API (the drop-in), into a
crash-safe store: each episode is on disk once ``save_episode()`` returns, whatever happens to this process.

    python examples/record.py --root /tmp/my_recording --episodes 3 --seconds 5
    python examples/record.py --root /tmp/my_recording --resume          # go on after a crash or a finalize
    python examples/record.py --root /tmp/my_recording --repo-id me/my_dataset --push  # then upload as LeRobot v3.0

The loop is LeRobot's (``lerobot-record``): read the robot, build the frame, ``add_frame``, wait for the next tick;
``save_episode`` between episodes. Needs torch (``pip install lerobot_zarr[torch]``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lerobot_zarr.torch import LeRobotDataset

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]


class FakeCamera:
    """A camera giving uint8 RGB frames (height, width, 3): a moving gradient, as cheap to make as a real read."""

    def __init__(self, height: int, width: int, seed: int):
        self.shape = (height, width, 3)
        ramp = np.add.outer(np.arange(height), np.arange(width)).astype(np.uint8)
        self._base = np.stack([ramp, ramp // 2, ramp // 3], -1)
        self._tick = seed

    def async_read(self) -> np.ndarray:
        self._tick += 1
        return self._base + np.uint8(self._tick % 256)


class FakeArm:
    """A 6-joint arm following sine waves; ``send_action`` moves it halfway towards the action."""

    def __init__(self):
        self.position = np.zeros(len(JOINTS), np.float32)

    def get_observation(self) -> np.ndarray:
        return self.position.copy()

    def send_action(self, action: np.ndarray) -> None:
        self.position += (action - self.position) / 2


def features(cameras: int, height: int, width: int) -> dict:
    """LeRobot's feature dict of the arm and cameras (as ``lerobot-record`` builds it from the robot)."""
    out = {"observation.state": {"dtype": "float32", "shape": (len(JOINTS),), "names": JOINTS},
           "action": {"dtype": "float32", "shape": (len(JOINTS),), "names": JOINTS}}
    for c in range(cameras):
        out[f"observation.images.cam{c}"] = {"dtype": "video", "shape": (height, width, 3),
                                             "names": ["height", "width", "channels"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", required=True, help="the dataset's folder (a new one, unless --resume)")
    parser.add_argument("--repo-id", default="local/fake_arm")
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0, help="per episode")
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--resume", action="store_true", help="go on recording the dataset at --root")
    parser.add_argument("--push", action="store_true", help="push the dataset to the Hub repo --repo-id when done")
    args = parser.parse_args()

    if args.resume:
        dataset = LeRobotDataset.resume(args.repo_id, root=args.root)
    else:
        dataset = LeRobotDataset.create(args.repo_id, args.fps, features(args.cameras, args.height, args.width),
                                        root=args.root, robot_type="fake_arm")
    arm = FakeArm()
    cameras = [FakeCamera(args.height, args.width, seed=c * 50) for c in range(args.cameras)]
    period = 1.0 / args.fps
    latencies, late = [], 0
    try:
        for episode in range(args.episodes):
            start = time.perf_counter()
            for i in range(round(args.seconds * args.fps)):
                tick = start + i * period
                t = i * period
                action = np.sin(t + np.arange(len(JOINTS), dtype=np.float32)).astype(np.float32)
                frame = {"observation.state": arm.get_observation(), "action": action, "task": "wave the arm"}
                for c, camera in enumerate(cameras):
                    frame[f"observation.images.cam{c}"] = camera.async_read()
                arm.send_action(action)
                before = time.perf_counter()
                dataset.add_frame(frame)
                latencies.append(time.perf_counter() - before)
                wait = tick + period - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                else:
                    late += 1
            before = time.perf_counter()
            dataset.save_episode()  # committed: on disk and readable by any process from here on
            print(f"episode {dataset.meta.total_episodes - 1}: {round(args.seconds * args.fps)} frames, "
                  f"save_episode {1000 * (time.perf_counter() - before):.0f} ms")
    finally:
        dataset.finalize()  # cheap: closes (the episodes saved are kept even if this never runs)
    ms = np.array(latencies) * 1000
    print(f"add_frame: p50 {np.percentile(ms, 50):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms; "
          f"{late} of {len(ms)} ticks late at {args.fps} fps; dataset: {dataset.meta.total_episodes} episodes, "
          f"{dataset.meta.total_frames} frames")
    if args.push:
        dataset.push_to_hub()
        print(f"pushed to {args.repo_id}")


if __name__ == "__main__":
    main()
