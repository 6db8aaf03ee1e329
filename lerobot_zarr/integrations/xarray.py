"""Analysis views of a store for the xarray extra: a lazy ``xarray.Dataset`` (one dask chunk per episode) and
LeRobot's statistics recomputed with dask.

The frame axis holds the frames of the materialized episodes of the dataset's selection, in episode order, with
``episode_index``, ``frame_index`` and ``index`` as in-memory coordinates (from the episode table, so xarray can
group by them) and ``timestamp`` as a lazy one; the ``episode`` axis holds the whole episode table with an
``episode_materialized`` flag, so episodes a partial store lacks are listed, not filled with zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import import_optional, warn_user
from ..lerobot.format import CAMERA_DTYPES, QUANTILES, TEXT_DTYPES, aggregate_stats, stats_json
from ..sampling.dataset import read_episode_rows
from ..store.tables import ArraySpec

if TYPE_CHECKING:
    import xarray as xr

    from ..sampling.dataset import LeRobotZarrDataset

__all__ = ["to_xarray", "lerobot_stats"]

_FROM_TABLE = ("episode_index", "frame_index", "index")


def _labels(names: Any, size: int) -> tuple[str | None, list[str] | None]:
    """LeRobot's ``names`` of a 1-D feature -> (axis name, labels), where they can be read off."""
    if isinstance(names, Mapping) and len(names) == 1:
        (axis, labels), = names.items()
        return (str(axis), list(map(str, labels))) if isinstance(labels, list) and len(labels) == size else \
            (str(axis), None)
    if isinstance(names, list) and len(names) == 1 and isinstance(names[0], list):
        names = names[0]  # nested one level, as some v2.1 datasets write them
    if isinstance(names, list) and len(names) == size and all(isinstance(n, str) for n in names):
        return None, list(names)
    return None, None


def _read_episode(root: str, name: str, spec: ArraySpec, location: tuple[int, int, int], length: int, shift: int
                  ) -> np.ndarray:
    """One episode's frames of one feature (a dask task): read from the rows the view's commit lists, so a worker
    reads that commit's data even after a writer moved on (or raises if its files are gone)."""
    pack, offset, rows = location
    values = read_episode_rows(root, name, spec, pack, rows, offset, length)
    return values - shift if shift else values


def to_xarray(ds: LeRobotZarrDataset) -> xr.Dataset:
    """The dataset's selection as a lazy ``xarray.Dataset`` (see :meth:`LeRobotZarrDataset.to_xarray`)."""
    xr = import_optional("xarray", "ds.to_xarray()")
    dask = import_optional("dask", "ds.to_xarray()")
    import dask.array as da

    meta = ds.meta
    selected = ds.episodes[meta.materialized_episodes[ds.episodes]]
    lengths = meta.episode_length[selected].tolist()
    features = meta.features
    data_vars: dict[str, Any] = {}
    coords: dict[str, Any] = {}
    locations = [ds.episode_location(e) for e in selected.tolist()]
    shifts = ds.index_shifts()
    left_out = dict(ds.left_out)
    for name, spec in ds.array_specs.items():
        if spec.storage == "mp4":  # decoded per sample only: not part of the analysis view
            left_out[name] = "kept as mp4 (decoded per sample): not in the xarray view; use ds[i] or ds.episode(e)"
            warn_user(f"{ds.root}: camera {name!r} is left out of the xarray view: {left_out[name]}")
            continue
        shift = shifts.get(name, np.zeros(meta.total_episodes, dtype=np.int64))
        blocks = [da.from_delayed(dask.delayed(_read_episode, pure=True)(str(ds.root), name, spec, loc, n,
                                                                         int(shift[e])),
                                  (n, *spec.frame_shape), dtype=spec.dtype,
                                  name=f"lerobot_zarr-{ds.root}-{name}-{loc[0]}-{loc[1]}-{n}-{int(shift[e])}")
                  for e, n, loc in zip(selected.tolist(), lengths, locations, strict=True)]
        data = da.concatenate(blocks, axis=0) if blocks else da.zeros((0, *spec.frame_shape), dtype=spec.dtype)
        dims = ["frame", *(f"{name}.{d}" for d in spec.dims)]
        if len(spec.frame_shape) == 1:
            axis, labels = _labels(features.get(name, {}).get("names"), spec.frame_shape[0])
            if axis is not None:
                dims[1] = f"{name}.{axis}"
            if labels is not None and dims[1] not in coords:
                coords[dims[1]] = labels
        if name in _FROM_TABLE:
            continue
        target = coords if name == "timestamp" else data_vars
        target[name] = (dims, data, {"lerobot_dtype": features.get(name, {}).get("dtype", spec.dtype.name)})
    # LeRobot's index columns follow from the episode table: in memory, so xarray can group by them
    local = np.concatenate([np.arange(n) for n in lengths]).astype(np.int64) if lengths else np.zeros(0, np.int64)
    coords["episode_index"] = ("frame", np.repeat(selected, lengths).astype(np.int64))
    coords["frame_index"] = ("frame", local)
    coords["index"] = ("frame", np.repeat(meta.episode_start[selected], lengths) + local)
    table = {"episode_start": meta.episode_start, "episode_end": meta.episode_end,
             "episode_length": meta.episode_length, "episode_task_index": meta.episode_task_index,
             "episode_materialized": meta.materialized_episodes}
    for key, values in table.items():
        data_vars[key] = (["episode"], np.asarray(values))
    coords["episode"] = np.arange(meta.total_episodes)
    tasks = np.asarray(meta.tasks, dtype=object)
    task_index = np.asarray(table["episode_task_index"])
    data_vars["episode_task"] = (["episode"], np.where(task_index >= 0, tasks[np.clip(task_index, 0, None)]
                                                       if len(tasks) else "", ""))
    attrs = {"fps": meta.fps, "robot_type": meta.robot_type or "", "root": str(ds.root),
             "tasks": list(meta.tasks), "left_out": left_out}
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)


def lerobot_stats(x: xr.Dataset, features: list[str] | None = None) -> dict[str, dict[str, list]]:
    """LeRobot's ``stats.json`` of numeric features recomputed from the data with dask, the way LeRobot makes
    it: each episode's min, max, mean, std and quantiles, then the count-weighted merge (parallel variance for
    std, count-weighted average for quantiles).

    Quantiles are the inverse CDF (numpy's ``inverted_cdf``), which LeRobot approximates with a 5000-bin
    histogram per episode: they differ from a LeRobot ``stats.json`` by up to about (max - min) / 5000. LeRobot
    computes means and variances in float32 (variance as E[x^2] - E[x]^2), so its std can be off by a few tens
    of float32 epsilons times E[x^2] where |mean| >> std; these are exact (float64). Image and video features
    (LeRobot samples frames for them) and text features (no stats) are not recomputed here.
    """
    dask = import_optional("dask", "lerobot_stats()")

    if not x.sizes.get("frame"):
        return {}
    names = features or [k for k, v in x.data_vars.items() if v.dims and v.dims[0] == "frame"
                         and v.attrs.get("lerobot_dtype") not in CAMERA_DTYPES | TEXT_DTYPES]
    names += [k for k in ("timestamp", "frame_index", "episode_index", "index") if features is None and k in x.coords]
    import dask.array as da

    episode_chunks = (tuple(np.unique(x["episode_index"].values, return_counts=True)[1].tolist()),)
    per_episode = {}
    for name in names:
        values = x[name].data
        if not isinstance(values, da.Array):  # the index columns kept in memory: cut them per episode too
            values = da.from_array(values, chunks=episode_chunks + values.shape[1:])
        blocks = values.to_delayed().reshape(-1)
        per_episode[name] = [dask.delayed(_episode_stats)(block) for block in blocks]
    computed = dask.compute(per_episode)[0]
    out = {}
    for name, rows in computed.items():
        if not rows:
            continue
        stacked = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        out[name] = stats_json(aggregate_stats(stacked))
    return out


def _episode_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """One episode's stats of a numeric feature as LeRobot 0.6.1 reduces it: over every axis but the last."""
    flat = values.reshape(-1, values.shape[-1] if values.ndim > 1 else 1).astype(np.float64)
    shape = (flat.shape[1],)
    stats = {"min": flat.min(axis=0), "max": flat.max(axis=0), "mean": flat.mean(axis=0), "std": flat.std(axis=0)}
    for key, q in QUANTILES.items():  # the inverse CDF, what LeRobot's histogram approximates
        stats[key] = np.quantile(flat, q, axis=0, method="inverted_cdf")
    stats = {k: v.reshape(shape) for k, v in stats.items()}
    stats["count"] = np.array([len(values)])
    return stats
