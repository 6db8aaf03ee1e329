"""Train on a mixture of datasets of different robots, checkpoint every step, get killed, resume: the same batches.

Three generated LeRobot datasets stand for three robots (state/action of 6, 14 and 26 dims, one names its
features differently). They are mixed by weight with `open_mixture` (renamed, zero-padded to 26 dims with
`<key>_dim_is_pad` masks, one normalization from the merged stats) and a small policy is trained on windows of
them. The script runs the training three ways and checks that they agree:

1. straight through, for reference;
2. in a child process that is killed with SIGKILL at a random step;
3. resumed from that child's last checkpoint (weights, optimizer and the loader's state, all in one file).

The resumed run sees exactly the batches the straight run saw after that step, and ends with the same weights.
With torch installed the loop is a torch one (`batch_loader` with a worker, whose prefetching the checkpoint
accounts for); without torch the same loop runs in numpy with `mix.sampler`.

Run: python examples/train_mixture.py [--steps 60] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import lerobot_zarr
from lerobot_zarr.testing.sample_data import write_sample_dataset

try:
    import torch

    from lerobot_zarr.torch import batch_loader
except ImportError:
    torch = None

FPS = 30
DELTAS = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(8)]}
WIDTH = 26


def make_datasets(work: Path) -> dict[str, float]:
    """Three datasets -> their weights: two LeRobot folders (arms of 6 and 14 dims) and a store recorded with
    ``lerobot_zarr.create`` by a humanoid (26 dims) whose recorder names its features otherwise."""
    sources = {}
    for name, dim, episodes, weight in (("arm_6dof", 6, 30, 0.5), ("biarm_14", 14, 12, 0.3)):
        folder = work / name
        if not folder.exists():
            write_sample_dataset(folder, n_episodes=episodes, lengths=(40, 120), state_dim=dim, action_dim=dim,
                                 fps=FPS, seed=dim, tasks=(f"task of {name}",))
        sources[str(folder)] = weight
    humanoid = work / "humanoid_26"
    if not humanoid.exists():
        rng = np.random.default_rng(26)
        features = {"observation.joint_pos": {"dtype": "float32", "shape": [WIDTH], "names": None},
                    "actions": {"dtype": "float32", "shape": [WIDTH], "names": None}}
        with lerobot_zarr.create(humanoid, fps=FPS, features=features, robot_type="humanoid") as recorder:
            for _ in range(8):
                walk = np.cumsum(rng.standard_normal((int(rng.integers(40, 120)), WIDTH)), axis=0) * 0.05
                recorder.add_episode({"observation.joint_pos": walk.astype(np.float32),
                                      "actions": (walk + 0.05).astype(np.float32)}, task="walk to the table")
    sources[str(humanoid)] = 0.2
    return sources


def open_mix(work: Path) -> lerobot_zarr.LeRobotZarrMixture:
    sources = make_datasets(work)
    humanoid = str(work / "humanoid_26")
    folders = [s for s in sources if s != humanoid]
    return lerobot_zarr.open_mixture(
        sources, delta_timestamps=DELTAS, pad_to={"observation.state": WIDTH, "action": WIDTH},
        rename={humanoid: {"observation.joint_pos": "observation.state", "actions": "action"}},
        root={s: work / "stores" / Path(s).name for s in folders}, progress=False)


def digest(batch: dict) -> str:
    parts = [np.asarray(batch[k]).tobytes() for k in ("index", "dataset_index", "action")]
    return hashlib.sha256(b"".join(parts)).hexdigest()[:12]


def save(path: Path, state: dict) -> None:
    """Atomically: a kill during the write leaves the previous checkpoint."""
    tmp = path.with_suffix(".tmp")
    if torch is not None:
        torch.save(state, tmp)
    else:
        tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def load(path: Path) -> dict | None:
    if not path.exists():
        return None
    return torch.load(path, weights_only=False) if torch is not None else json.loads(path.read_text())


def train(work: Path, steps: int, checkpoint: Path, log: Path, slow: float = 0.0) -> list[float]:
    """The training loop: resumes from ``checkpoint`` if it exists, logs each step's batch digest."""
    mix = open_mix(work)
    stats = mix.meta.stats  # merged over the robots, per dimension (padding excluded)
    mean = np.asarray(stats["action"]["mean"], np.float32)
    std = np.asarray(stats["action"]["std"], np.float32) + 1e-6
    saved = load(checkpoint)
    step = 0 if saved is None else saved["step"]
    with open(log, "a") as out:
        if torch is not None:
            torch.manual_seed(0)
            policy = torch.nn.Linear(2 * WIDTH, 8 * WIDTH)
            optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
            loader = batch_loader(mix, 32, num_workers=1)  # the mixture's weighted sampler
            if saved is not None:
                policy.load_state_dict(saved["policy"])
                optimizer.load_state_dict(saved["optimizer"])
                loader.load_state_dict(saved["loader"])
            while step < steps:
                for batch in loader:  # one epoch of the mixture per pass
                    state = batch["observation.state"].reshape(32, -1)
                    target = (batch["action"] - torch.from_numpy(mean)) / torch.from_numpy(std)
                    valid = ~(batch["action_is_pad"][..., None] | batch["action_dim_is_pad"][:, None, :])
                    loss = ((policy(state).reshape(target.shape) - target) ** 2 * valid).sum() / valid.sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    step += 1
                    out.write(f"{step} {digest({k: v.numpy() for k, v in batch.items() if k != 'task'})}\n")
                    out.flush()
                    save(checkpoint, {"step": step, "policy": policy.state_dict(),
                                      "optimizer": optimizer.state_dict(), "loader": loader.state_dict()})
                    time.sleep(slow)
                    if step >= steps:
                        break
            return policy.weight.detach().numpy().ravel()[:5].tolist()
        # numpy: a linear policy trained by SGD, batches from the mixture's sampler
        rng = np.random.default_rng(0)
        weights = rng.standard_normal((2 * WIDTH, 8 * WIDTH)).astype(np.float32) * 0.01
        sampler = mix.sampler(32, seed=0)
        if saved is not None:
            weights = np.asarray(saved["weights"], np.float32)
            sampler.load_state_dict(saved["sampler"])
        while step < steps:
            for idx in sampler:
                batch = mix.get_batch(idx)
                state = batch["observation.state"].reshape(32, -1)
                target = ((batch["action"] - mean) / std).reshape(32, -1)
                valid = ~(batch["action_is_pad"][..., None] | batch["action_dim_is_pad"][:, None, :]).reshape(32, -1)
                grad = state.T @ ((state @ weights - target) * valid) / valid.sum()
                weights -= 0.01 * grad
                step += 1
                out.write(f"{step} {digest(batch)}\n")
                out.flush()
                save(checkpoint, {"step": step, "weights": weights.tolist(), "sampler": sampler.state_dict()})
                time.sleep(slow)
                if step >= steps:
                    break
        return weights.ravel()[:5].tolist()


def read_log(log: Path) -> dict[int, str]:
    seen: dict[int, str] = {}
    for line in log.read_text().splitlines():
        step, value = line.split()
        if seen.setdefault(int(step), value) != value:
            raise SystemExit(f"step {step} saw another batch after the restart")
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a new temp dir)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="lerobot_zarr-mixture-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.child:  # the run that gets killed: slow enough to be killed mid-way
        train(work, args.steps, work / "killed.ckpt", work / "killed.log", slow=0.02)
        return
    mix = open_mix(work)
    print(mix)
    print(f"  {len(mix)} frames; weights {mix.meta.weights}; batch keys: "
          f"{sorted(mix.get_batch([0]))}")
    print(f"  training with {'torch (batch_loader, 1 worker)' if torch is not None else 'numpy (mix.sampler)'}")
    for name in ("straight", "killed"):
        for suffix in (".ckpt", ".log"):
            (work / f"{name}{suffix}").unlink(missing_ok=True)
    t0 = time.perf_counter()
    final = train(work, args.steps, work / "straight.ckpt", work / "straight.log")
    print(f"1. straight run: {args.steps} steps in {time.perf_counter() - t0:.1f} s")

    kill_at = int(np.random.default_rng().integers(5, args.steps - 5))
    child = subprocess.Popen([sys.executable, __file__, "--child", "--steps", str(args.steps), "--dir", str(work)])
    log = work / "killed.log"
    while child.poll() is None and not (log.exists() and len(log.read_text().splitlines()) >= kill_at):
        time.sleep(0.005)
    if child.poll() is not None:
        raise SystemExit(f"the child run ended (code {child.returncode}) before it could be killed")
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    reached = len(read_log(log))
    print(f"2. child run killed with SIGKILL after step {reached}")

    resumed = train(work, args.steps, work / "killed.ckpt", log)
    straight, after = read_log(work / "straight.log"), read_log(log)
    if straight != after:
        bad = min(s for s in straight if straight[s] != after.get(s))
        raise SystemExit(f"resumed run saw another batch at step {bad}")
    if not np.allclose(final, resumed, rtol=0, atol=0):
        raise SystemExit(f"resumed run ended with other weights: {resumed} vs {final}")
    print(f"3. resumed from its last checkpoint: steps {reached + 1}..{args.steps} saw the same batches as the "
          f"straight run, and the final weights are equal ({final[:3]} ...)")
    if args.dir is None:
        print(f"(work folder: {work})")


if __name__ == "__main__":
    main()
