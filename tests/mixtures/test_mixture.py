"""Mixtures (``open_mixture``): values, schemas, stats and errors, checked against each dataset's own samples
through an independent per-item reference (``ds[j]`` padded by hand), on stores made here and on the real
datasets in ../shared/datasets (different schemas, same fps)."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

import lerobot_zarr as lz
from lerobot_zarr.errors import ArgumentError, DeltaTimestampsError, FrameIndexError, SchemaMismatchError
from lerobot_zarr.mixtures.mixture import merge_stats

pytestmark = pytest.mark.filterwarnings("ignore::lerobot_zarr.LeRobotZarrWarning")  # tests that expect one say so
FPS = 10
DELTAS = {"observation.state": [-0.1, 0.0], "action": [k / FPS for k in range(4)]}
DATASETS_DIR = Path(__file__).parents[2] / ".." / "shared" / "datasets"


def make_store(path: Path, features: dict[str, tuple[str, list[int]]], lengths: list[int], *, fps: float = FPS,
               seed: int = 0, tasks: tuple[str, ...] = ("pick", "place")) -> Path:
    """A store of random values (different per seed), written with the public writer."""
    rng = np.random.default_rng(seed)
    spec = {name: {"dtype": dtype, "shape": shape, "names": None} for name, (dtype, shape) in features.items()}
    with lz.create(path, fps=fps, features=spec, durable=False, min_free_bytes=0) as w:
        for e, n in enumerate(lengths):
            frames = {}
            for name, (dtype, shape) in features.items():
                if dtype == "image":
                    frames[name] = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
                else:
                    frames[name] = (rng.standard_normal((n, *shape)) * 10 + seed).astype(dtype)
            w.add_episode(frames, task=tasks[e % len(tasks)])
    return path


def reference_item(mix: lz.LeRobotZarrMixture, i: int, renames: dict[int, dict], pad_to: dict[str, int],
                   deltas: dict | None) -> dict:
    """Sample ``i`` of the mixture built by hand from its dataset's own ``ds[j]``: renamed, zero-padded to
    ``pad_to`` with a mask, zeros and ``_is_pad`` for a feature the dataset lacks."""
    k = int(np.searchsorted(mix.offsets, i, side="right") - 1)
    item = mix.datasets[k][i - int(mix.offsets[k])]
    rename = renames.get(k, {})
    out = {}
    for name, value in item.items():
        if name != "task":
            pad = name.endswith("_is_pad")
            base = name[:-len("_is_pad")] if pad else name
            if rename.get(base, base) in mix.meta.features:  # an intersection leaves the others out
                out[rename.get(base, base) + ("_is_pad" if pad else "")] = np.asarray(value)
    for key, spec in mix.meta.features.items():
        window = len((deltas or {}).get(key, ())) or None
        if key not in out:
            shape = ([window] if window else []) + ([] if spec["shape"] == [1] else list(spec["shape"]))
            out[key] = np.zeros(shape, dtype=np.uint8 if spec["dtype"] in ("image", "video") else spec["dtype"])
            out[f"{key}_is_pad"] = np.ones(window or (), dtype=bool)
            if key in pad_to:
                out[f"{key}_dim_is_pad"] = np.ones(pad_to[key], dtype=bool)
        elif key in pad_to:
            width = out[key].shape[-1]
            padded = np.zeros((*out[key].shape[:-1], pad_to[key]), dtype=out[key].dtype)
            padded[..., :width] = out[key]
            out[key], out[f"{key}_dim_is_pad"] = padded, np.arange(pad_to[key]) >= width
    holders = [kk for kk, ds in enumerate(mix.datasets)]
    for key in mix.meta.features:
        if f"{key}_is_pad" not in out and not all(_holds(mix, kk, key, renames) for kk in holders):
            out[f"{key}_is_pad"] = np.asarray(False)
    out["task"] = item["task"]
    out["dataset_index"] = np.int64(k)
    return out


def _holds(mix: lz.LeRobotZarrMixture, k: int, key: str, renames: dict[int, dict]) -> bool:
    rename = renames.get(k, {})
    return key in {rename.get(n, n) for n in mix.datasets[k].array_specs}


def assert_matches_reference(mix: lz.LeRobotZarrMixture, indices: np.ndarray, renames: dict[int, dict] | None = None,
                             pad_to: dict[str, int] | None = None, deltas: dict | None = None) -> None:
    batch = mix.get_batch(indices)
    for row, i in enumerate(indices.tolist()):
        want = reference_item(mix, i, renames or {}, pad_to or {}, deltas)
        item = mix[i]
        assert set(item) == set(batch) == set(want), (set(item) ^ set(want))
        for key, value in want.items():
            if key == "task":
                assert batch[key][row] == value == item[key]
                continue
            np.testing.assert_array_equal(batch[key][row], value, err_msg=f"{key} of sample {i}")
            np.testing.assert_array_equal(np.asarray(item[key]), value, err_msg=f"{key} of mix[{i}]")
            assert batch[key].dtype == np.asarray(item[key]).dtype == value.dtype, key


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Three stores of different schemas, the same fps: A (state 4, action 3, a camera), B (joint_pos 6 -> state,
    act 5 -> action, an extra feature, a camera), C (state 4, action 3, no camera, float64 extra)."""
    base = tmp_path_factory.mktemp("mix")
    a = make_store(base / "a", {"observation.state": ("float32", [4]), "action": ("float32", [3]),
                                "observation.images.cam": ("image", [6, 8, 3])}, [7, 12, 5], seed=1)
    b = make_store(base / "b", {"observation.joint_pos": ("float32", [6]), "act": ("float32", [5]),
                                "observation.images.cam": ("image", [6, 8, 3]), "gripper": ("float32", [2])},
                   [9, 4], seed=2, tasks=("open the door",))
    c = make_store(base / "c", {"observation.state": ("float32", [4]), "action": ("float32", [3]),
                                "torque": ("float64", [3])}, [3, 8, 6, 2], seed=3)
    return {"a": str(a), "b": str(b), "c": str(c)}


RENAME_B = {"observation.joint_pos": "observation.state", "act": "action"}


def test_union_with_rename_and_pad_to_equals_each_datasets_own_samples(stores):
    mix = lz.open_mixture({stores["a"]: 0.5, stores["b"]: 0.3, stores["c"]: 0.2}, delta_timestamps=DELTAS,
                          rename={stores["b"]: RENAME_B}, features="union",
                          pad_to={"observation.state": 8, "action": 6})
    assert len(mix) == 24 + 13 + 19 and mix.offsets.tolist() == [0, 24, 37, 56]
    assert [len(ds) for ds in mix.datasets] == [24, 13, 19]
    assert mix.meta.features["observation.state"]["shape"] == [8]
    assert mix.meta.features["action"]["shape"] == [6]
    rng = np.random.default_rng(0)
    idx = np.concatenate([np.arange(len(mix)), rng.integers(0, len(mix), 40)])
    assert_matches_reference(mix, idx, {1: RENAME_B}, {"observation.state": 8, "action": 6}, DELTAS)
    batch = mix.get_batch(idx)
    # padding: zeros past each dataset's width, masked; a feature a dataset lacks: zeros and _is_pad
    k = batch["dataset_index"]
    assert (batch["action"][k == 0][..., 3:] == 0).all() and (batch["action_dim_is_pad"][k == 0] ==
                                                              [False] * 3 + [True] * 3).all()
    assert (batch["action_dim_is_pad"][k == 1] == [False] * 5 + [True]).all()
    assert (batch["gripper"][k != 1] == 0).all() and batch["gripper_is_pad"].tolist() == (k != 1).tolist()
    assert (batch["torque_is_pad"] == (k != 2)).all() and batch["torque"].dtype == np.float64
    cam = batch["observation.images.cam"]
    assert cam.dtype == np.uint8 and (cam[k == 2] == 0).all() and (batch["observation.images.cam_is_pad"] ==
                                                                   (k == 2)).all()
    # each dataset's rows are its own get_batch at the mapped indices, renamed and padded
    dataset, local = mix.locate(idx)
    for kk, rename in ((0, {}), (1, RENAME_B), (2, {})):
        own = mix.datasets[kk].get_batch(local[dataset == kk])
        for name, value in own.items():
            if name == "task":
                assert [t for t, r in zip(batch["task"], (dataset == kk).tolist()) if r] == value
                continue
            base = name[:-len("_is_pad")] if name.endswith("_is_pad") else name
            key = rename.get(base, base) + name[len(base):]
            got = batch[key][dataset == kk]
            np.testing.assert_array_equal(got[..., :value.shape[-1]] if value.ndim > 1 else got, value, err_msg=key)
    # the item's task is its dataset's own
    assert {t for t, kk in zip(batch["task"], k.tolist()) if kk == 1} == {"open the door"}
    assert mix[-1]["dataset_index"] == 2 and mix.get_batch([-1])["index"][0] == mix.datasets[2][-1]["index"]


def test_intersection_keeps_common_features_and_says_what_it_leaves_out(stores):
    with pytest.warns(lz.LeRobotZarrWarning, match="left out"):
        mix = lz.open_mixture({stores["a"]: 1, stores["b"]: 1, stores["c"]: 2}, delta_timestamps=DELTAS,
                              rename={stores["b"]: RENAME_B}, pad_to={"observation.state": 6, "action": 5})
    assert set(mix.meta.features) == {"observation.state", "action", "timestamp", "frame_index", "episode_index",
                                      "index", "task_index"}
    assert set(mix.left_out) == {"observation.images.cam", "gripper", "torque"}
    assert stores["c"] in mix.left_out["observation.images.cam"]
    assert_matches_reference(mix, np.arange(len(mix)), {1: RENAME_B}, {"observation.state": 6, "action": 5}, DELTAS)
    assert "gripper" not in mix.get_batch([0, 30])
    assert mix.meta.weights == (0.25, 0.25, 0.5)


def test_one_dataset_batches_are_served_as_the_dataset_gives_them(stores):
    with pytest.warns(lz.LeRobotZarrWarning, match=r"\['observation.images.cam', 'torque'\] are left out"):
        mix = lz.open_mixture([stores["a"], stores["c"]], delta_timestamps=DELTAS, features="intersection")
    part = mix.datasets[1].get_batch([0, 5, 3])
    batch = mix.get_batch(mix.offsets[1] + np.array([0, 5, 3]))
    assert set(part) - set(batch) == {"torque"}
    for key, value in batch.items():
        if key == "task":
            assert part[key] == value
        elif key != "dataset_index":
            np.testing.assert_array_equal(value, part[key])
            assert value.dtype == part[key].dtype
    assert batch["dataset_index"].tolist() == [1, 1, 1]
    assert_matches_reference(mix, np.array([0, 30, 1, 29, 2], dtype=np.int32), deltas=DELTAS)


def test_get_batches_and_batches_equal_one_get_batch_each(stores):
    mix = lz.open_mixture({stores["a"]: 1, stores["b"]: 1, stores["c"]: 1}, rename={stores["b"]: RENAME_B},
                          features="union", pad_to={"observation.state": 6, "action": 5}, delta_timestamps=DELTAS)
    rng = np.random.default_rng(3)
    batches = [rng.integers(0, len(mix), n) for n in (5, 1, 17, 8)] + [np.sort(rng.integers(0, len(mix), 9))]
    many = mix.get_batches(batches)
    assert mix.get_batches([]) == []
    sampler = mix.sampler(6, seed=2)
    through = list(mix.batches(sampler, gather=3))
    again = [mix.get_batch(idx) for idx in mix.sampler(6, seed=2)]
    assert len(through) == len(again) == len(mix) // 6
    for got, want in [*zip(many, [mix.get_batch(b) for b in batches]), *zip(through, again)]:
        assert set(got) == set(want)
        for key in want:
            if key == "task":
                assert got[key] == want[key]
            else:
                np.testing.assert_array_equal(got[key], want[key], err_msg=key)
                assert got[key].dtype == want[key].dtype
    with pytest.raises(ArgumentError, match="gather"):
        next(mix.batches(sampler, gather=0))


def test_the_mixture_pickles_as_its_datasets_do(stores):
    mix = lz.open_mixture({stores["a"]: 1, stores["b"]: 1}, rename={stores["b"]: RENAME_B}, features="union",
                          pad_to={"observation.state": 6, "action": 5}, delta_timestamps=DELTAS)
    again = pickle.loads(pickle.dumps(mix))
    idx = np.array([3, 30, 0, 36, 12])
    a, b = mix.get_batch(idx), again.get_batch(idx)
    assert set(a) == set(b)
    for key in a:
        if key != "task":
            np.testing.assert_array_equal(a[key], b[key])
    assert len(pickle.dumps(mix)) < 20_000
    again.close()
    mix.close()


def test_float_chw_images_and_one_dtype_per_feature(tmp_path):
    a = make_store(tmp_path / "a", {"x": ("float32", [2]), "cam": ("image", [4, 6, 3])}, [5], seed=1)
    b = make_store(tmp_path / "b", {"x": ("float64", [2]), "cam": ("image", [4, 6, 3])}, [4], seed=2)
    mix = lz.open_mixture([a, b], image_format="float32_chw")
    batch = mix.get_batch(np.arange(9))
    assert batch["x"].dtype == np.float64 and batch["cam"].shape == (9, 3, 4, 6) and batch["cam"].dtype == np.float32
    np.testing.assert_array_equal(batch["x"][5:], mix.datasets[1].get_batch(np.arange(4))["x"])
    np.testing.assert_array_equal(batch["x"][:5], mix.datasets[0].get_batch(np.arange(5))["x"].astype(np.float64))
    assert mix[0]["x"].dtype == np.float64
    c = make_store(tmp_path / "c", {"x": ("int32", [2])}, [4], seed=2)
    with pytest.raises(SchemaMismatchError, match=r"'x' is float32 in .*a' but int32 in .*c'"):
        lz.open_mixture([a, c])


# errors ---------------------------------------------------------------------------------------------------------
def test_different_widths_without_pad_to_name_both_datasets_and_shapes(stores):
    with pytest.raises(SchemaMismatchError) as err:
        lz.open_mixture([stores["a"], stores["b"]], rename={stores["b"]: RENAME_B})
    text = str(err.value)
    assert stores["a"] in text and stores["b"] in text and "[4]" in text and "[6]" in text and "pad_to" in text
    assert err.value.feature == "observation.state"
    with pytest.raises(SchemaMismatchError, match=r"shape \[4\] in .* but \[6\]"):  # windowed: shapes per frame
        lz.open_mixture([stores["a"], stores["b"]], rename={stores["b"]: RENAME_B}, delta_timestamps=DELTAS,
                        pad_to={"action": 5})


def test_cameras_of_different_sizes_need_the_same_resize(tmp_path):
    a = make_store(tmp_path / "a", {"x": ("float32", [2]), "cam": ("image", [6, 8, 3])}, [5], seed=1)
    b = make_store(tmp_path / "b", {"x": ("float32", [2]), "cam": ("image", [10, 12, 3])}, [4], seed=2)
    with pytest.raises(SchemaMismatchError, match=r"camera 'cam' has shape \[6, 8, 3\] .* \[10, 12, 3\].*resize="):
        lz.open_mixture([a, b])
    with pytest.raises(ArgumentError, match="only vector features"):
        lz.open_mixture([a, b], pad_to={"cam": 3})


def test_a_mismatched_fps_names_both_datasets(tmp_path, stores):
    slow = make_store(tmp_path / "slow", {"observation.state": ("float32", [4])}, [5], fps=15)
    with pytest.raises(SchemaMismatchError, match=rf"{stores['a']}.* 10 fps, .*slow.* 15"):
        lz.open_mixture([stores["a"], slow])


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(rename={"B": {"nope": "x"}}), ArgumentError, r"'nope' is not a feature of its samples"),
    (dict(rename={"B": {"act": "gripper"}}), ArgumentError, r"has a feature 'gripper' already"),
    (dict(rename={"B": {"act": "x", "gripper": "x"}}), ArgumentError, r"two of its features the name 'x'"),
    (dict(rename={"elsewhere": {"a": "b"}}), ArgumentError, r"'elsewhere' is not one of the mixture's sources"),
    (dict(episodes={"elsewhere": [0]}), ArgumentError, r"episodes: 'elsewhere' is not one of"),
    (dict(pad_to={"observation.state": 6, "action": 4}), ArgumentError,
     r"pad_to\['action'\] = 4 is narrower than 'action' in .*b' \(5\)"),
    (dict(pad_to={"nothing": 4}), ArgumentError, r"pad_to names \['nothing'\]"),
    (dict(delta_timestamps={"gripper": [0.0]}), DeltaTimestampsError, r"'gripper' is not in \[.*a'\]"),
    (dict(delta_timestamps={"nope": [0.0]}), DeltaTimestampsError, r"'nope' is not a feature of any dataset"),
    (dict(delta_timestamps={"action": [0.05]}), DeltaTimestampsError, r"not a multiple of 1/fps"),
    (dict(features="all"), ArgumentError, r"features must be 'intersection' or 'union'"),
])
def test_bad_arguments_are_refused_with_what_is_wrong(stores, kwargs, error, match):
    sources = [stores["a"], stores["b"]]
    given = {"rename": {stores["b"]: RENAME_B}, "pad_to": {"observation.state": 6, "action": 5}}
    for key, value in kwargs.items():
        if key == "rename":
            value = {stores["b"] if k == "B" else k: {**RENAME_B, **v} for k, v in value.items()}
        given[key] = value
    with pytest.raises(error, match=match):
        lz.open_mixture(sources, **given)


def test_datasets_with_nothing_in_common_and_bad_weights_are_refused(stores):
    with pytest.raises(SchemaMismatchError, match="no feature in common besides LeRobot's index columns"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", lz.LeRobotZarrWarning)
            lz.open_mixture([stores["b"], stores["c"]])
    for weights, match in [([1], "one number per source"), ([1, -1], "finite number >= 0"), ([0, 0], "sum to 0"),
                           ([1, float("nan")], "finite"), ("some", "numbers, 'frames' or 'equal'")]:
        with pytest.raises(ArgumentError, match=match):
            lz.open_mixture([stores["a"], stores["c"]], weights=weights)
    with pytest.raises(ArgumentError, match="not both"):
        lz.open_mixture({stores["a"]: 1}, weights=[1])
    with pytest.raises(ArgumentError, match="more than once"):
        lz.open_mixture([stores["a"], stores["a"]])
    with pytest.raises(ArgumentError, match="no frames"):
        lz.open_mixture({stores["a"]: 1, stores["c"]: 1}, episodes={stores["c"]: []})
    mix = lz.open_mixture([stores["a"], stores["c"]])
    with pytest.raises(FrameIndexError, match="index 43 is out of range for a dataset of 43 frames"):
        mix.get_batch([43])
    with pytest.raises(ArgumentError, match="integers"):
        mix["0"]


def test_episodes_and_other_options_go_to_each_dataset(stores, tmp_path):
    mix = lz.open_mixture({stores["a"]: 1, stores["c"]: 1}, episodes={stores["c"]: {1: slice(2, 5), 3: None}},
                          weights=None)
    assert len(mix.datasets[1]) == 3 + 2 and mix.datasets[0].num_episodes == 3
    assert mix.get_batch([24])["frame_index"][0] == 2 and mix.get_batch([24])["episode_index"][0] == 1
    by_frames = lz.open_mixture([stores["a"], stores["c"]], weights="frames")
    assert by_frames.meta.weights == pytest.approx((24 / 43, 19 / 43))


# stats ------------------------------------------------------------------------------------------------------------
def _independent_merge(stats: list[dict]) -> dict:
    """LeRobot's aggregation written out: count-weighted mean, parallel variance, min/max, weighted quantiles."""
    counts = np.array([float(np.asarray(s["count"]).reshape(-1)[0]) for s in stats])
    means = np.array([np.asarray(s["mean"], float) for s in stats])
    stds = np.array([np.asarray(s["std"], float) for s in stats])
    w = counts.reshape(-1, *[1] * (means.ndim - 1))
    mean = (means * w).sum(0) / counts.sum()
    out = {"mean": mean, "std": np.sqrt(((stds ** 2 + (means - mean) ** 2) * w).sum(0) / counts.sum()),
           "min": np.min([s["min"] for s in stats], 0), "max": np.max([s["max"] for s in stats], 0),
           "count": np.array([counts.sum()])}
    for q in ("q01", "q10", "q50", "q90", "q99"):
        if all(q in s for s in stats):
            out[q] = (np.array([s[q] for s in stats], float) * w).sum(0) / counts.sum()
    return out


def test_stats_are_merged_as_lerobot_does_per_dimension_when_padded(stores):
    mix = lz.open_mixture({stores["a"]: 1, stores["b"]: 1, stores["c"]: 1}, rename={stores["b"]: RENAME_B},
                          features="union", pad_to={"observation.state": 8, "action": 6})
    per = mix.meta.dataset_stats
    assert set(per[1]) >= {"observation.state", "action", "gripper"} and "act" not in per[1]
    # a feature of one width: exactly the independent formula over the datasets that have it
    for key in ("timestamp", "observation.images.cam", "torque"):
        holders = [p[key] for p in per if key in p]
        want = _independent_merge(holders)
        got = mix.meta.stats[key]
        assert set(got) == set(want), key
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=f"{key} {name}")
    # padded: each dimension over the datasets that have it, zeros where none has it
    got = mix.meta.stats["action"]
    for dim in range(6):
        holders = [{n: np.asarray(v)[dim:dim + 1] if n != "count" else v for n, v in p["action"].items()}
                   for p in per if np.shape(p["action"]["mean"])[0] > dim]
        for name in ("mean", "std", "min", "max"):
            want = _independent_merge(holders)[name][0] if holders else 0.0
            assert got[name][dim] == pytest.approx(want, rel=1e-12, abs=1e-12), (dim, name)
    assert got["count"].tolist() == [24 + 13 + 19]
    assert got["mean"].shape == (6,) and got["mean"][5] == 0 and got["std"][5] == 0


def test_merge_stats_matches_lerobots_aggregate_stats():
    compute_stats = pytest.importorskip("lerobot.datasets.compute_stats", reason="lerobot is not installed")
    rng = np.random.default_rng(0)
    stats = []
    for n in (10, 250, 3):
        s = {"mean": rng.standard_normal(5), "std": rng.random(5), "min": -rng.random(5), "max": rng.random(5),
             "count": np.array([n])}
        s.update({q: rng.standard_normal(5) for q in ("q01", "q10", "q50", "q90", "q99")})
        stats.append(s)
    del stats[2]["q50"]
    theirs = compute_stats.aggregate_stats([{"x": s} for s in stats])["x"]
    ours = merge_stats(stats)
    assert set(ours) == set(theirs)
    for name in theirs:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-12, err_msg=name)


# the real datasets ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real(module_tmp, g1_store):
    """Stores of the three real datasets: G1 is the session's shared read-only store (its camera at 24x32: the
    full-size one takes 1.3 GB), the other two are made here and deleted with the module."""
    if not DATASETS_DIR.is_dir():
        pytest.skip(f"real LeRobot datasets not found at {DATASETS_DIR.resolve()}")
    roots = {"G1-policy-train": str(g1_store)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lz.LeRobotZarrWarning)  # their cameras' videos are missing
        for name in ["open_50", "record-test"]:
            roots[name] = str(module_tmp / name)
            lz.open_dataset(str(DATASETS_DIR.resolve() / name), root=roots[name], progress=False).close()
    return roots


def test_real_datasets_of_three_schemas_mix_with_rename_and_pad_to(real):
    g1, o50, rec = real["G1-policy-train"], real["open_50"], real["record-test"]
    deltas = {"observation.state": [-1 / 30, 0.0], "action": [k / 30 for k in range(16)]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lz.LeRobotZarrWarning)
        with pytest.raises(SchemaMismatchError, match=r"'observation.state' has shape \[26\] in .*(?i:g1).* but "
                                                      r"\[6\] in .*record-test.*pad_to"):
            lz.open_mixture([g1, rec], delta_timestamps=deltas)
        mix = lz.open_mixture({g1: 0.5, o50: 0.3, rec: 0.2}, delta_timestamps=deltas,
                              rename={o50: {"state": "observation.state", "actions": "action"}},
                              pad_to={"observation.state": 34, "action": 34})
    assert len(mix) == 35965 + 20814 + 1492 and mix.meta.fps == 30
    rng = np.random.default_rng(1)
    edges = np.concatenate([mix.offsets[1:] - 1, mix.offsets[:-1], mix.offsets[:-1] + 1])
    assert_matches_reference(mix, np.concatenate([edges, rng.integers(0, len(mix), 60)]),
                             {1: {"state": "observation.state", "actions": "action"}},
                             {"observation.state": 34, "action": 34}, deltas)
    batch = mix.get_batch(rng.integers(0, len(mix), 512))
    width = {0: 26, 1: 34, 2: 6}
    for k, w in width.items():
        rows = batch["dataset_index"] == k
        assert (batch["action_dim_is_pad"][rows].sum(1) == 34 - w).all()
        assert (batch["action"][rows][..., w:] == 0).all()
    # stats: per dimension over the datasets that have it; G1 (v2.1) has no quantiles, so the merge has none
    stats = mix.meta.stats["action"]
    assert "q50" not in stats and stats["mean"].shape == (34,)
    own = [mix.meta.dataset_stats[k]["action"] for k in range(3)]
    want = _independent_merge([{n: np.asarray(v)[:6] if n != "count" else v for n, v in s.items()} for s in own])
    np.testing.assert_allclose(stats["mean"][:6], want["mean"], rtol=1e-12)
    np.testing.assert_allclose(stats["std"][:6], want["std"], rtol=1e-12)
    np.testing.assert_allclose(stats["mean"][26:], np.asarray(own[1]["mean"])[26:], rtol=1e-12)
    assert mix.meta.tasks == ["Pick up the yellow bottle on the table.", "lingzu teleoperation",
                              "Pick the orange cube and place it in the box"]
    assert mix.meta.robot_type is None and len(set(mix.meta.robot_types)) == 3


def test_real_stats_merge_matches_lerobot(real):
    compute_stats = pytest.importorskip("lerobot.datasets.compute_stats", reason="lerobot is not installed")
    mix = lz.open_mixture([real["open_50"], real["record-test"], real["G1-policy-train"]], features="union",
                          pad_to={"observation.state": 26, "action": 26})
    own = [{k: {s: np.asarray(v) for s, v in st.items()} for k, st in mix.meta.dataset_stats[i].items()}
           for i in range(3)]
    keys = ("timestamp", "frame_index", "index", "state", "actions")  # of one width: LeRobot's function applies
    theirs = compute_stats.aggregate_stats([{k: v for k, v in s.items() if k in keys} for s in own])
    for key in keys:
        assert set(mix.meta.stats[key]) == set(theirs[key]), key
        for name in theirs[key]:
            np.testing.assert_allclose(mix.meta.stats[key][name], theirs[key][name], rtol=1e-12,
                                       err_msg=f"{key} {name}")
    # padded: LeRobot's aggregation of the dimensions record-test (6) and G1 (26) both have, then G1's alone
    both = compute_stats.aggregate_stats([{"a": {n: (v if n == "count" else v[:6]) for n, v in s["action"].items()}}
                                          for s in own[1:]])["a"]
    for name in ("mean", "std", "min", "max"):
        np.testing.assert_allclose(mix.meta.stats["action"][name][:6], both[name], rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(mix.meta.stats["action"][name][6:], own[2]["action"][name][6:], rtol=1e-12)


# json state of a whole mixture, quickly ---------------------------------------------------------------------------
def test_sampler_state_of_a_mixture_round_trips_through_json(stores):
    mix = lz.open_mixture({stores["a"]: 3, stores["c"]: 1})
    s = mix.sampler(4, seed=7)
    it = iter(s)
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(s.state_dict()))
    rest = [b.tolist() for b in it]
    t = mix.sampler(4, seed=7)
    t.load_state_dict(state)
    assert [b.tolist() for b in t] == rest
    other = lz.open_mixture({stores["a"]: 1, stores["c"]: 1}).sampler(4, seed=7)
    with pytest.raises(ArgumentError, match="weights"):
        other.load_state_dict(state)


# LeRobot's MultiLeRobotDataset and Hub sources ----------------------------------------------------------------------
def test_items_equal_lerobots_multi_dataset(tmp_path, monkeypatch):
    """Same-schema datasets: each item equals LeRobot's own ``MultiLeRobotDataset`` item (concatenated in the order
    given, ``dataset_index`` added), keys, dtypes and values."""
    pytest.importorskip("lerobot", reason="lerobot is not installed")
    torch = pytest.importorskip("torch")
    try:
        from lerobot.datasets.multi_dataset import MultiLeRobotDataset
    except ImportError as exc:
        pytest.skip(f"lerobot's MultiLeRobotDataset does not import: {exc}")
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name, seed, n in (("a", 1, 4), ("b", 2, 3)):
        write_sample_dataset(tmp_path / "local" / name, n_episodes=n, lengths=(5, 12), seed=seed, fps=FPS)
    deltas = {"observation.state": [-0.1, 0.0], "action": [0.0, 0.1, 0.2]}
    theirs = MultiLeRobotDataset(["local/a", "local/b"], root=tmp_path, delta_timestamps=deltas)
    mix = lz.open_mixture([tmp_path / "local" / "a", tmp_path / "local" / "b"], delta_timestamps=deltas,
                          root={tmp_path / "local" / n: tmp_path / "stores" / n for n in "ab"})
    assert len(mix) == len(theirs)
    for i in range(len(theirs)):
        want, got = theirs[i], mix[i]
        assert set(want) == set(got), (i, set(want) ^ set(got))
        for key, value in want.items():
            if isinstance(value, str):
                assert got[key] == value, (i, key)
                continue
            mine = torch.from_numpy(np.asarray(got[key]))
            if value.ndim == 0 and mine.ndim == 1 or key in ("timestamp", "frame_index", "episode_index", "index",
                                                                "task_index"):
                mine = mine.reshape(value.shape)
            assert mine.dtype == value.dtype, (i, key, mine.dtype, value.dtype)
            torch.testing.assert_close(mine, value, rtol=0, atol=0, msg=f"item {i} {key}")


def test_hub_repos_and_folders_mix_with_per_source_options(tmp_path, monkeypatch):
    from hub_fixtures import make_env

    from lerobot_zarr.testing.hub_server import HubServer
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    a = write_sample_dataset(tmp_path / "gen" / "a", n_episodes=6, lengths=(8, 15), seed=11, fps=FPS)
    b = write_sample_dataset(tmp_path / "gen" / "b", version="v2.1", n_episodes=4, lengths=(8, 15), seed=12, fps=FPS)
    local = write_sample_dataset(tmp_path / "gen" / "local", n_episodes=3, lengths=(8, 15), seed=13, fps=FPS)
    with HubServer(tmp_path / "storage") as server:
        server.add_repo("org/a", a, tags=["v3.0"])
        server.add_repo("org/b", b, tags=["v2.1"])
        make_env(monkeypatch, tmp_path, server.endpoint)
        mix = lz.open_mixture({"org/a": 0.5, "org/b": 0.3, str(local): 0.2}, delta_timestamps=DELTAS,
                              episodes={"org/a": [1, 4]}, revision={"org/b": "v2.1"}, progress=False)
        alone = lz.open_dataset("org/a", episodes=[1, 4], delta_timestamps=DELTAS, progress=False)
    assert mix.datasets[0].meta.materialized_episodes.tolist() == [False, True, False, False, True, False]
    assert len(mix.datasets[0]) == len(alone)
    rows = np.arange(len(alone))
    batch = mix.get_batch(rows)
    for key, value in alone.get_batch(rows).items():
        if key != "task":
            np.testing.assert_array_equal(batch[key], value, err_msg=key)
    assert_matches_reference(mix, np.arange(len(mix)), deltas=DELTAS)


def test_many_small_datasets_in_one_mixture(tmp_path):
    """40 datasets (as a lab's many recordings): weights by frames, every batch the datasets' own samples."""
    stores = [make_store(tmp_path / f"s{k:02d}", {"observation.state": ("float32", [4]), "action": ("float32", [3])},
                         [3 + k % 5, 2 + k % 3], seed=k) for k in range(40)]
    mix = lz.open_mixture(stores, weights="frames", delta_timestamps=DELTAS)
    sizes = [len(ds) for ds in mix.datasets]
    assert len(mix) == sum(sizes) and mix.meta.weights == pytest.approx(tuple(n / sum(sizes) for n in sizes))
    sampler = mix.sampler(32, seed=5)
    seen = np.concatenate(list(sampler))
    assert len(seen) == len(mix) // 32 * 32
    counts = np.bincount(mix.locate(seen[:256])[0], minlength=40)  # the first block of 256 samples
    assert np.abs(counts - 256 * np.array(sizes) / sum(sizes)).max() < 1  # each dataset's share within one
    assert_matches_reference(mix, np.concatenate([sampler.batch(0), np.arange(len(mix))]), deltas=DELTAS)
    mix.close()


# a state identifies the data it was saved on (issue 29) ------------------------------------------------------------
SIMPLE = {"observation.state": ("float32", [4]), "action": ("float32", [3])}


def test_a_state_is_refused_on_a_dataset_whose_content_changed_but_not_its_size(tmp_path):
    """An episode deleted and another of the same length appended: same sizes, other frames. The state names the
    dataset whose content differs."""
    a = make_store(tmp_path / "a", SIMPLE, [7, 12, 5], seed=1)
    b = make_store(tmp_path / "b", SIMPLE, [9, 4], seed=2)
    sampler = lz.open_mixture({str(a): 1, str(b): 1}).sampler(4, seed=3)
    next(iter(sampler))
    state = json.loads(json.dumps(sampler.state_dict()))
    assert sorted(state) == ["contents", "format", "global_batch_size", "position", "seed", "sizes", "version",
                             "weights"]
    same = lz.open_mixture({str(a): 1, str(b): 1}).sampler(4, seed=3)
    same.load_state_dict(state)  # the same data: restored
    with lz.open_dataset(a, mode="r+") as w:
        w.delete_episodes([1])
        w.add_episode({k: np.full((12, *s), 5, np.float32) for k, (_, s) in SIMPLE.items()}, task="pick")
    changed = lz.open_mixture({str(a): 1, str(b): 1}).sampler(4, seed=3)
    assert changed.schedule.sizes.tolist() == state["sizes"], "the same sizes"
    with pytest.raises(ArgumentError, match=f"other data of {a}"):
        changed.load_state_dict(state)


def test_a_state_is_refused_on_a_mixture_whose_equal_sized_sources_or_selections_differ(tmp_path):
    a = make_store(tmp_path / "a", SIMPLE, [6, 6, 6], seed=1)
    b = make_store(tmp_path / "b", SIMPLE, [6, 6], seed=2)
    state = lz.open_mixture([str(a), str(b)], episodes={str(a): [0, 1]}).sampler(4, seed=0).state_dict()
    with pytest.raises(ArgumentError, match=f"other data of {b}"):
        lz.open_mixture([str(b), str(a)], episodes={str(a): [0, 1]}).sampler(4, seed=0).load_state_dict(state)
    same = lz.open_mixture([str(a), str(b)], episodes={str(a): {0: (0, 6), 1: (0, 6)}})
    same.sampler(4, seed=0).load_state_dict(state)  # the same frames, spelled as frame ranges
    with pytest.raises(ArgumentError, match=f"other data of {a}"):
        lz.open_mixture([str(a), str(b)], episodes={str(a): [1, 2]}).sampler(4, seed=0).load_state_dict(state)


def test_a_state_of_an_earlier_version_is_restored_with_a_warning(tmp_path):
    a = make_store(tmp_path / "a", SIMPLE, [6, 9], seed=1)
    sampler = lz.open_mixture([str(a)]).sampler(4, seed=0)
    state = {k: v for k, v in sampler.state_dict().items() if k != "contents"}
    with pytest.warns(lz.LeRobotZarrWarning, match="earlier version"):
        sampler.load_state_dict({**state, "version": 1, "position": 8})
    assert sampler.position == 8


def test_one_store_by_two_spellings_is_refused(tmp_path, stores):
    a = stores["a"]
    link = tmp_path / "link"
    link.symlink_to(a)
    for other in (a + "/", str(link), a + "/."):
        with pytest.raises(ArgumentError, match="the same folder"):
            lz.open_mixture({a: 1, other: 1})
    with pytest.raises(ArgumentError, match="given more than once"):
        lz.open_mixture([a, a])


def test_a_source_and_its_store_are_refused_as_one_store(tmp_path, monkeypatch):
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "cache"))
    src = write_sample_dataset(tmp_path / "src", n_episodes=2, lengths=(5, 8), seed=4)
    store = lz.open_dataset(src, progress=False).root
    with pytest.raises(ArgumentError, match="the same store"):
        lz.open_mixture({str(src): 1, str(store): 1})


def test_weights_and_counts_are_checked_before_any_dataset_opens(monkeypatch):
    import lerobot_zarr.mixtures.mixture as mixture_module

    opened = []
    monkeypatch.setattr(mixture_module, "open_dataset", lambda name, **kw: opened.append(name))
    names = [f"org/ds{k}" for k in range(1000)]
    for kwargs, match in [({"sources": names}, "below 1/256"),
                          ({"sources": dict.fromkeys(names[:300], 1.0)}, "below 1/256"),
                          ({"sources": {"org/a": 1.0, "org/b": 1e-3}}, r"\['org/b'\]"),
                          ({"sources": [f"org/x{k}" for k in range(40000)]}, "1 to 32767 datasets")]:
        with pytest.raises(ArgumentError, match=match):
            lz.open_mixture(**kwargs)
    assert opened == [], "refused before any dataset was opened"


def test_garbage_state_values_and_arguments_are_argument_errors(tmp_path):
    a = make_store(tmp_path / "a", SIMPLE, [6, 9], seed=1)
    mix = lz.open_mixture([str(a)])
    sampler = mix.sampler(4, seed=0)
    state = sampler.state_dict()
    for change, match in [({"position": 2**63}, "at most"), ({"position": 1.5}, "integer"),
                          ({"position": None}, "integer"), ({"sizes": 15}, "list of frame counts"),
                          ({"sizes": ["15"]}, "list of frame counts"), ({"sizes": None}, "list of frame counts"),
                          ({"weights": "abc"}, "list of numbers"), ({"weights": {"a": 1}}, "list of numbers"),
                          ({"contents": "x"}, "content keys"), ({"contents": [1, 2]}, "content keys"),
                          ({"version": [2]}, "not supported")]:
        with pytest.raises(ArgumentError, match=match):
            sampler.load_state_dict({**state, **change})
    for kwargs, match in [({"batch_size": 2**40}, "batch_size must be at most"), ({"batch_size": 4, "seed": 2**64},
                          "seed must be at most"), ({"batch_size": 4, "seed": -1}, "seed must be at least"),
                          ({"batch_size": 4, "batches_per_epoch": 2**60}, "batches_per_epoch must be at most"),
                          ({"batch_size": 4, "rank": 0, "world_size": 2**50}, "world_size must be at most")]:
        with pytest.raises(ArgumentError, match=match):
            mix.sampler(**kwargs)
    top = mix.sampler(4, seed=2**64 - 1)
    assert not np.array_equal(next(iter(top)), next(iter(mix.sampler(4, seed=0)))), "2**64 - 1 is not seed 0"
    with pytest.raises(ArgumentError, match="step must be at most"):
        sampler.batch(2**62)
