"""``lerobot-zarr info``: describe a dataset from its metadata, and the summary ``convert`` prints too.

:func:`describe_json` gathers what is shown into a :class:`Summary` (also the ``--json`` output);
:func:`describe` lays it out for a terminal.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import numpy as np

from ..cameras.depth import Quantizer, is_depth_feature
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES, TEXT_DTYPES
from ..sampling.meta import DatasetMeta
from .text import episodes_text, size_text, source_line

__all__ = ["EpisodeLengths", "FeatureSummary", "Status", "Summary", "add_parser", "describe", "describe_json",
           "feature_status", "is_store", "run"]

# stored: in the store, or to be stored by a transcode ("to store" in a source's summary); not stored: never (a
# dtype LeRobot does not write); unavailable: the source cannot give it for the episodes concerned; partly
# unavailable: some lack it; needs PyAV: a video camera this Python cannot decode
Status = Literal["stored", "to store", "not stored", "unavailable", "partly unavailable", "needs PyAV"]


class FeatureSummary(TypedDict):
    dtype: str
    shape: list[int]
    names: Any  # as LeRobot's info.json gives them: a list, a dict of lists, or None
    status: Status
    why: str
    episodes_with: NotRequired[list[int]]  # stored cameras: what to select for complete samples
    episodes_without: NotRequired[list[int]]
    depth: NotRequired[str]  # a depth camera: how it is recorded (unit, a video's quantizer), in words


class EpisodeLengths(TypedDict):
    min: int
    median: float
    max: int


class Summary(TypedDict):
    """What ``info`` shows of a dataset (keys in the order of the JSON output)."""

    location: str
    is_store: bool
    source: dict[str, Any]
    source_line: str
    codebase_version: str | None
    robot_type: str | None
    fps: float
    total_episodes: int
    episodes_in_store: int
    total_frames: int
    episode_length: EpisodeLengths | None  # None: no episodes
    tasks: list[str]
    features: dict[str, FeatureSummary]
    stats_mean: dict[str, list[float]]  # data features (not LeRobot's own columns) that have stats
    remote_bytes: NotRequired[dict[str, int]]  # a remote source (Hub repo, bucket): bytes per top-level folder
    local_bytes: NotRequired[int]  # a store: allocated on disk
    estimated_store_bytes: NotRequired[int]  # a source: what a transcode of every episode would store


def add_parser(subparsers: Any, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``info`` command and its options."""
    info = subparsers.add_parser("info", parents=[common], help="describe a dataset from its metadata (no data "
                                                                "read): Hub repo, folder, store")
    info.add_argument("source", help="LeRobot folder, store, or Hub repo id org/name")
    info.add_argument("--revision", default=None, help="Hub branch, tag or commit (default: LeRobot's choice)")
    info.add_argument("--token", default=None, help="Hub token (default: the one `hf auth login` saved)")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")
    return info


def run(args: argparse.Namespace) -> int:
    from ..api import inspect

    print_summary(inspect(args.source, revision=args.revision, token=args.token), as_json=args.json)
    return 0


def print_summary(meta: DatasetMeta, *, as_json: bool) -> None:
    """Print :func:`describe` of ``meta``, or its JSON."""
    print(json.dumps(describe_json(meta), indent=2, default=str) if as_json else describe(meta))


def is_store(meta: DatasetMeta) -> bool:
    """Whether ``meta`` describes a store (else a source's metadata: ``inspect``)."""
    from ..store.state import has_commit_point

    return isinstance(meta.root, Path) and has_commit_point(meta.root)


def feature_status(meta: DatasetMeta, name: str) -> tuple[Status, str]:
    """``(status, why)`` of a feature: ``stored`` (in the store, or to be stored by a transcode), ``not stored``
    (never, e.g. a dtype LeRobot does not write), ``unavailable`` (the source cannot give it for the episodes
    concerned: samples leave it out), ``partly unavailable`` (some episodes lack it: samples of a selection of the
    others have it), or ``needs PyAV`` (a video camera this Python cannot decode: samples leave it out until PyAV
    is installed)."""
    if name in meta.not_materialized:
        return "not stored", meta.not_materialized[name]
    status, why = _availability(meta, name)
    if name in meta.needs_pyav and status != "unavailable":
        return "needs PyAV", meta.needs_pyav[name] + (f"; besides, {status}: {why}" if why else "")
    return status, why


def _held_or_all(meta: DatasetMeta) -> np.ndarray:
    """The episodes a store holds, or every episode if it holds none (or ``meta`` is a source's)."""
    return np.flatnonzero(meta.materialized_episodes) if meta.materialized_episodes.any() \
        else np.arange(meta.total_episodes)


def _availability(meta: DatasetMeta, name: str) -> tuple[Status, str]:
    reasons = meta.unavailable.get(name, {})
    held = _held_or_all(meta)
    lacking = [int(e) for e in held if int(e) in reasons]
    if not lacking:
        return "stored", ""
    first = reasons[lacking[0]]
    where = "held" if meta.materialized_episodes.any() else "of the dataset"
    if len(lacking) == len(held):
        return "unavailable", f"in all {len(held)} episodes {where}; e.g. {first}"
    have = [int(e) for e in held if int(e) not in reasons]
    return "partly unavailable", (f"missing in {len(lacking)} of {len(held)} episodes {where} "
                                  f"{episodes_text(lacking)}: samples leave it out unless you select "
                                  f"episodes that have it, e.g. {episodes_text(have)}; e.g. {first}")


def _stats_means(meta: DatasetMeta) -> dict[str, list[float]]:
    out = {}
    for name in meta.features:
        s = meta.stats.get(name, {})
        if name in DEFAULT_FEATURES or name not in meta.stored_features or "mean" not in s:
            continue
        out[name] = np.asarray(s["mean"], dtype=float).reshape(-1).tolist()
    return out


def _frame_bytes(ft: dict) -> int:
    """A frame's bytes in a store (a text frame's: its place in the shard index and a short string)."""
    dtype = ft["dtype"]
    if dtype in TEXT_DTYPES:
        return 16 + 32
    if dtype in CAMERA_DTYPES:
        depth = is_depth_feature(ft)
        itemsize = 1 if not depth else 2 if dtype == "video" or (ft.get("info") or {}).get("depth_unit") == "mm" else 4
    else:
        itemsize = np.dtype(dtype).itemsize
    return int(np.prod(ft.get("shape") or [1])) * itemsize


def _depth_text(ft: dict) -> str:
    """How a depth camera is recorded, in words (the unit; a video's 12-bit quantizer)."""
    info = ft.get("info") if isinstance(ft.get("info"), dict) else {}
    unit = info.get("depth_unit")
    text = f"depth map in {unit}" if unit else "depth map of unrecorded unit (served as stored)"
    if ft["dtype"] == "video":
        try:
            q = Quantizer.of(info)
        except ValueError as exc:
            return f"{text}; quantizer unreadable ({exc})"
        text += (f"; 12-bit codes, {'log' if q.use_log else 'linear'} quantizer {q.depth_min:g}..{q.depth_max:g} m"
                 + (f" (shift {q.shift:g} m)" if q.use_log else ""))
    return text


def describe_json(meta: DatasetMeta) -> Summary:
    """The summary of :func:`describe` as plain JSON-able data."""
    m = meta
    features: dict[str, FeatureSummary] = {}
    held_or_all = _held_or_all(m)
    for name, ft in m.features.items():
        status, why = feature_status(m, name)
        features[name] = {"dtype": ft["dtype"], "shape": list(ft.get("shape") or []), "names": ft.get("names"),
                          "status": status, "why": why}
        if name in m.depth_keys:
            features[name]["depth"] = _depth_text(ft)
        if ft["dtype"] in CAMERA_DTYPES and name in m.stored_features:
            lacking = m.unavailable.get(name, {})
            features[name]["episodes_with"] = [int(e) for e in held_or_all if int(e) not in lacking]
            features[name]["episodes_without"] = [int(e) for e in held_or_all if int(e) in lacking]
    store = is_store(m)
    if not store:  # metadata only: what a transcode would store
        for summary in features.values():
            if summary["status"] == "stored":
                summary["status"] = "to store"
    out: Summary = {
        "location": str(m.root),
        "is_store": store,
        "source": m.source,
        "source_line": source_line(m.source),
        "codebase_version": m.info.get("codebase_version"),
        "robot_type": m.robot_type,
        "fps": m.fps,
        "total_episodes": m.total_episodes,
        "episodes_in_store": int(m.materialized_episodes.sum()),
        "total_frames": m.total_frames,
        "episode_length": {"min": int(m.episode_length.min()), "median": float(np.median(m.episode_length)),
                           "max": int(m.episode_length.max())} if m.total_episodes else None,
        "tasks": list(m.tasks),
        "features": features,
        "stats_mean": _stats_means(m),
    }
    if m.source.get("remote_bytes"):
        out["remote_bytes"] = m.source["remote_bytes"]
    if store:
        from ..sources.cache import disk_usage

        out["local_bytes"] = disk_usage(Path(m.root))[0]  # allocated: packs are sparse until their episodes come
    else:
        out["estimated_store_bytes"] = sum(
            _frame_bytes(ft) * int(m.episode_length[[e for e in range(m.total_episodes)
                                                     if e not in m.unavailable.get(k, {})]].sum())
            for k, ft in m.features.items() if features[k]["status"] in ("to store", "partly unavailable",
                                                                         "needs PyAV"))
    return out


def describe(meta: DatasetMeta) -> str:
    """A human-readable summary of a dataset: origin, counts, episodes, tasks, features (stored, not stored,
    unavailable, with why), stats of the data features, size."""
    d = describe_json(meta)
    lengths = d["episode_length"]
    held = d["episodes_in_store"]
    lines = [
        f"location:     {d['location']}"
        + ("" if d["is_store"] else " (the source's metadata; stores made from it: `lerobot-zarr cache ls`)"),
        f"source:       {d['source_line']}",
        f"format:       LeRobot {d['codebase_version']}, robot_type={d['robot_type']}, fps={d['fps']:g}",
        f"episodes:     {d['total_episodes']}" + (f" ({held} in the store)" if d["is_store"] else ""),
        f"frames:       {d['total_frames']}",
    ]
    if lengths:
        lines.append(f"lengths:      min {lengths['min']}, median {lengths['median']:g}, max {lengths['max']}")
    tasks = d["tasks"]
    lines.append(f"tasks ({len(tasks)}):" + "".join(f"\n  [{i}] {t}" for i, t in enumerate(tasks[:10]))
                 + ("\n  ..." if len(tasks) > 10 else ""))
    lines.append("features:")
    for name, ft in d["features"].items():
        names = ft["names"]
        shown = f"  names={str(names)[:50]}{'...' if len(str(names)) > 50 else ''}" if names else ""
        plain = ft["status"] in ("stored", "to store") or name in DEFAULT_FEATURES
        status = ft["status"] if plain else ft["status"].upper()
        lines.append(f"  {name:<32} {ft['dtype']:<8} {tuple(ft['shape'])!s:<14} {status}{shown}")
        if "depth" in ft:
            lines.append(f"      {ft['depth']}")
        if ft["why"]:
            lines.append(f"      why: {ft['why']}")
    if d["stats_mean"]:
        lines.append("stats (mean, first values):")
        for name, mean in d["stats_mean"].items():
            lines.append(f"  {name:<32} {np.array2string(np.asarray(mean[:4]), precision=3)}"
                         f"{' ...' if len(mean) > 4 else ''}")
    if "remote_bytes" in d:
        lines.append("at source:    " + ", ".join(f"{k}/ {size_text(v)}" for k, v in d["remote_bytes"].items()))
    if "local_bytes" in d:
        lines.append(f"store size:   {size_text(d['local_bytes'])} on disk")
    else:
        lines.append(f"store size:   {size_text(d['estimated_store_bytes'])} once transcoded (cameras decoded raw)")
    return "\n".join(lines)
