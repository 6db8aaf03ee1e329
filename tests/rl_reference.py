"""Reference transitions for the replay-buffer tests (writing/test_transitions.py, integrations/test_rl_buffer.py),
independent of the library: episodes generated from ``(seed, episode)`` alone, so that any process rebuilds any
transition from the identity its state carries (``state[0]`` = episode, ``state[1]`` = step), and plain numpy checks of
what a buffer gives back against them.

Cameras are uint8 pixels divided by 255 (exact in a uint8 store), CHW, as LeRobot's processors give them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

STATE = "observation.state"
CAMERA = "observation.images.front"
STATE_DIM = 4
ACTION_DIM = 2
IMAGE = (3, 6, 8)  # C, H, W


def episode(seed: int, e: int, *, max_len: int = 8, camera: bool = True) -> dict[str, Any]:
    """Episode ``e``: ``length`` transitions, ``length + 1`` states (the last one its final observation); even
    episodes end with done, odd ones with truncated."""
    rng = np.random.default_rng([seed, e])
    n = int(rng.integers(1, max_len + 1))
    states = rng.standard_normal((n + 1, STATE_DIM)).astype(np.float32)
    states[:, 0], states[:, 1] = e, np.arange(n + 1)
    out = {"length": n, "states": states, "actions": rng.standard_normal((n, ACTION_DIM)).astype(np.float32),
           "rewards": rng.standard_normal(n).astype(np.float32), "penalty": rng.standard_normal(n).astype(np.float32),
           "end": "done" if e % 2 == 0 else "truncated"}
    if camera:
        out["pixels"] = rng.integers(0, 256, (n + 1, *IMAGE), dtype=np.uint8)
    return out


def _frame(ep: dict, t: int) -> dict[str, np.ndarray]:
    out = {STATE: ep["states"][t]}
    if "pixels" in ep:
        out[CAMERA] = ep["pixels"][t].astype(np.float32) / np.float32(255)
    return out


def transitions(seed: int, e: int, **kwargs: Any) -> list[dict[str, Any]]:
    """Episode ``e`` as the arguments of ``add`` (values with LeRobot's leading batch dimension of 1)."""
    ep = episode(seed, e, **kwargs)
    n = ep["length"]
    return [{"state": {k: v[None] for k, v in _frame(ep, t).items()}, "action": ep["actions"][t][None],
             "reward": float(ep["rewards"][t]), "next_state": {k: v[None] for k, v in _frame(ep, t + 1).items()},
             "done": t == n - 1 and ep["end"] == "done", "truncated": t == n - 1 and ep["end"] == "truncated",
             "complementary_info": {"penalty": float(ep["penalty"][t])}} for t in range(n)]


def expected(seed: int, e: int, t: int, **kwargs: Any) -> dict[str, Any]:
    """Transition ``t`` of episode ``e`` as a buffer gives it back (float32, cameras float32 CHW)."""
    ep = episode(seed, e, **kwargs)
    n = ep["length"]
    return {"state": _frame(ep, t), "next_state": _frame(ep, t + 1), "action": ep["actions"][t],
            "reward": ep["rewards"][t], "done": t == n - 1 and ep["end"] == "done",
            "truncated": t == n - 1 and ep["end"] == "truncated", "penalty": ep["penalty"][t]}


def as_numpy(batch: dict[str, Any]) -> dict[str, Any]:
    """A batch with tensors (torch) turned into numpy arrays, nested dicts included."""
    out = {}
    for k, v in batch.items():
        if isinstance(v, dict):
            out[k] = as_numpy(v)
        elif hasattr(v, "detach"):
            out[k] = v.detach().cpu().numpy()
        else:
            out[k] = v
    return out


def check_batch(batch: dict[str, Any], seed: int, *, cameras: bool = True, **kwargs: Any) -> list[tuple[int, int]]:
    """Assert every transition of ``batch`` (numpy or torch, LeRobot's layout) equals the reference transition its
    state names, bit for bit; return the (episode, step) identities in batch order. ``cameras=False`` skips the
    camera values (DrQ changes them)."""
    b = as_numpy(batch)
    ids = []
    for i in range(len(b["reward"])):
        e, t = int(b["state"][STATE][i, 0]), int(b["state"][STATE][i, 1])
        ref = expected(seed, e, t, **kwargs)
        where = f"transition {i} (episode {e}, step {t})"
        for part in ("state", "next_state"):
            for key, value in ref[part].items():
                if key == CAMERA and not cameras:
                    continue
                got = b[part][key][i]
                assert got.dtype == np.float32 and np.array_equal(got, value), f"{where}: {part}[{key}] differs"
        assert np.array_equal(b["action"][i], ref["action"]), f"{where}: action differs"
        assert b["reward"][i] == ref["reward"], f"{where}: reward {b['reward'][i]} != {ref['reward']}"
        assert bool(b["done"][i]) == ref["done"] and bool(b["truncated"][i]) == ref["truncated"], f"{where}: flags"
        assert b["complementary_info"]["penalty"][i] == ref["penalty"], f"{where}: complementary_info differs"
        ids.append((e, t))
    return ids


def reported_commits(first: str, rest: str) -> list[int]:
    """The counts a killed writer process printed as ``C <count>`` lines (its first line, then the rest of its
    output): complete lines only, since a SIGKILL can cut the last one short (``C`` without its number)."""
    complete = [first.rstrip("\n"), *rest.split("\n")[:-1]]  # the piece after the last newline may be cut
    return [int(line[2:]) for line in complete if line.startswith("C ") and line[2:].isdigit()]
