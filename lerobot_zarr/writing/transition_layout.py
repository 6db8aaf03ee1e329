"""How an RL buffer store holds transitions (:mod:`lerobot_zarr.writing.transitions`): which store feature holds
each value of a transition (:class:`Layout`, of :class:`Slot` s, recorded in the store's ``.rl_buffer.json``), and
the conversions of values between LeRobot's buffer and the store: checked into the store's representation
(:func:`stored_value`; float camera frames become uint8 HWC images) and back as LeRobot gives them
(:func:`lerobot_values`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from ..cameras.images import to_float32_chw
from ..errors import (
    ArgumentError,
    CorruptStoreError,
    SchemaMismatchError,
    UnsupportedStoreError,
    ValueRangeError,
    warn_user,
)
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES
from ..utils.fileio import atomic_write, load_json, read_bounded

__all__ = ["Layout", "Slot", "Rounding", "lerobot_values", "stored_value", "as_stored", "host_array", "squeezed",
           "scalar", "hwc", "numeric_storage", "lerobot_published_images", "lerobot_png_pixels", "ACTION", "REWARD",
           "DONE", "TRUNCATED", "COMPLEMENTARY", "OBS_IMAGE",
           "LAYOUT_FILE", "IMAGE_STORAGES", "ImageStorage", "DEFAULT_TASK", "DEFAULT_FPS"]

ACTION, REWARD, DONE, TRUNCATED = "action", "next.reward", "next.done", "next.truncated"  # LeRobot's names
COMPLEMENTARY = "complementary_info."
OBS_IMAGE = "observation.image"  # LeRobot's prefix of camera keys (DrQ augments these)
LAYOUT_FILE = ".rl_buffer.json"
_MAX_LAYOUT_BYTES = 1 << 20
DEFAULT_TASK = "from_replay_buffer"  # LeRobot's to_lerobot_dataset task name
DEFAULT_FPS = 30
ImageStorage = Literal["uint8", "float32"]
IMAGE_STORAGES = get_args(ImageStorage)
_STORED = ("float32", "uint8", "bool", "image")


@dataclass(frozen=True)
class Slot:
    """One value of a transition: the store feature holding it, the per-transition shape LeRobot's buffer gives
    back, and how it is stored (float32, uint8 or bool numbers, or ``image``: uint8 HWC frames of a CHW camera)."""

    feature: str
    shape: tuple[int, ...]
    stored: str = "float32"

    def spec(self) -> dict[str, Any]:
        """The LeRobot feature spec of the store (a 0-d value is LeRobot's shape ``[1]``)."""
        if self.stored == "image":
            c, h, w = self.shape
            return {"dtype": "image", "shape": [h, w, c], "names": ["height", "width", "channels"]}
        return {"dtype": self.stored, "shape": list(self.shape) or [1], "names": None}

    def to_json(self) -> dict[str, Any]:
        return {"feature": self.feature, "shape": list(self.shape), "stored": self.stored}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Slot:
        try:
            slot = cls(str(doc["feature"]), tuple(int(s) for s in doc["shape"]), str(doc["stored"]))
        except (KeyError, TypeError, ValueError):
            raise CorruptStoreError(f"{where}: malformed slot {doc!r:.120}") from None
        if slot.stored not in _STORED or any(s < 0 for s in slot.shape) or (
                slot.stored == "image" and (len(slot.shape) != 3 or slot.shape[0] not in (1, 3, 4))):
            raise CorruptStoreError(f"{where}: malformed slot {doc!r:.120}")
        return slot


@dataclass(frozen=True)
class Layout:
    """Which store feature holds each value of a transition: of an RL buffer store (:meth:`of_transition`,
    recorded in its layout file) or of a LeRobot dataset read as transitions (:meth:`of_dataset`)."""

    state: dict[str, Slot]
    action: Slot
    complementary: dict[str, Slot]
    done: bool = True  # the store has next.done (a LeRobot dataset may lack it: done is then its episode ends)
    truncated: bool = True

    def slots(self) -> list[Slot]:
        """Every stored slot: state keys, action, reward, done, truncated (where stored), complementary info."""
        flags = [Slot(REWARD, ())] + [Slot(DONE, (), "bool")] * self.done
        flags += [Slot(TRUNCATED, (), "bool")] * self.truncated
        return [*self.state.values(), self.action, *flags, *self.complementary.values()]

    def features(self) -> dict[str, dict[str, Any]]:
        return {slot.feature: slot.spec() for slot in self.slots()}

    def cameras(self) -> list[str]:
        """State values kept as frames (3-D: float32 CHW, or uint8 images): the store computes their stats when
        asked, not at each commit (per channel, as LeRobot computes an image's and publishes a float camera's: a
        pass over the episode's sampled pixels, more than the commit of a short episode costs otherwise)."""
        return [s.feature for s in self.state.values() if s.stored == "image" or (s.stored == "float32"
                                                                                   and len(s.shape) == 3)]

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "state": {k: s.to_json() for k, s in self.state.items()},
                "action": self.action.to_json(), "complementary_info": {k: s.to_json()
                                                                        for k, s in self.complementary.items()}}

    @classmethod
    def read(cls, root: Path) -> Layout | None:
        """The layout recorded in an RL buffer store (None if the folder has no layout file)."""
        path = root / LAYOUT_FILE
        try:  # a real file inside the store (no link out of it), small, not nested deeper than the depth guard
            doc = load_json(read_bounded(path, _MAX_LAYOUT_BYTES, root=root, what="buffer layout"), str(path),
                            error=lambda message: CorruptStoreError(message, path=path))
        except FileNotFoundError:
            return None
        where = str(path)
        version = doc.get("version") if isinstance(doc, dict) else None
        if version != 1:
            raise UnsupportedStoreError(f"{where}: not a buffer layout this version reads (version {version!r:.20})",
                                        path=path)
        try:
            state = {str(k): Slot.from_json(v, where) for k, v in doc["state"].items()}
            complementary = {str(k): Slot.from_json(v, where) for k, v in doc["complementary_info"].items()}
            return cls(state, Slot.from_json(doc["action"], where), complementary)
        except (KeyError, AttributeError):
            raise CorruptStoreError(f"{where}: missing 'state', 'action' or 'complementary_info'", path=path) from None

    def write(self, root: Path) -> None:
        atomic_write(root / LAYOUT_FILE, json.dumps(self.to_json(), indent=1).encode(), durable=True, root=root)

    def check(self, features: Mapping[str, Any], where: str) -> None:
        """Every slot names a feature of the store (``features``: its LeRobot specs) of the dtype and shape the slot
        gives back: a layout file that disagrees with its store is refused before a value is read."""
        for slot in self.slots():
            want, have = slot.spec(), features.get(slot.feature)
            held = (have.get("dtype"), list(have.get("shape") or ())) if isinstance(have, Mapping) else None
            if held != (want["dtype"], want["shape"]):
                raise CorruptStoreError(f"{where}/{LAYOUT_FILE}: gives {slot.feature!r} as {want['dtype']} of shape "
                                        f"{want['shape']}, the store holds "
                                        f"{f'{held[0]} of shape {held[1]}' if held else 'no such feature'}",
                                        path=f"{where}/{LAYOUT_FILE}", feature=slot.feature)

    @classmethod
    def of_transition(cls, state: Mapping[str, Any], action: Any, complementary_info: Mapping[str, Any] | None,
                      image_storage: ImageStorage) -> Layout:
        """The layout LeRobot's buffer allocates for its first transition: every key of ``state``, each value's
        shape without its leading batch dimension of 1."""
        if not isinstance(state, Mapping) or not state:
            raise ArgumentError(f"state must be a non-empty dict {{key: array}}, got {state!r:.80}")
        slots = {}
        for key, value in state.items():
            if not isinstance(key, str) or key in _RESERVED or key.startswith(COMPLEMENTARY):
                raise ArgumentError(f"state key {key!r} is not allowed (it is one of LeRobot's own columns or a "
                                    f"complementary_info key)")
            v = squeezed(value, f"state[{key!r}]")
            camera = (key.startswith(OBS_IMAGE) and v.ndim == 3 and v.shape[0] in (1, 3, 4) and v.dtype.kind == "f"
                      and image_storage == "uint8")
            slots[key] = Slot(key, v.shape, "image" if camera else numeric_storage(v))
        a = squeezed(action, "action")
        info = {}
        for key, value in (complementary_info or {}).items():
            if not isinstance(key, str) or not key:
                raise ArgumentError(f"complementary_info keys must be non-empty strings, got {key!r}")
            v = squeezed(value, f"complementary_info[{key!r}]")
            # LeRobot keeps python numbers as float32 (their type may change from one transition to the next)
            python = isinstance(value, (bool, int, float))
            info[key] = Slot(COMPLEMENTARY + key, v.shape, "float32" if python else numeric_storage(v))
        return cls(slots, Slot(ACTION, a.shape, numeric_storage(a)), info)

    @classmethod
    def of_dataset(cls, features: Mapping[str, Mapping[str, Any]], stored: Iterable[str], state_keys: Sequence[str],
                   where: str) -> Layout:
        """A LeRobot dataset's transitions as LeRobot's ``from_lerobot_dataset`` makes them: ``state_keys``,
        ``action`` and ``next.reward`` are needed, ``next.done`` is optional (else episode ends), every
        ``complementary_info.*`` feature comes along; values keep the dataset's feature shapes (shape ``[1]``: a
        number, as LeRobot's dataset items give it)."""
        stored = set(stored)
        keys = list(dict.fromkeys(state_keys))
        missing = [k for k in [*keys, ACTION, REWARD] if k not in stored]
        if missing:
            have = sorted(k for k in stored if k not in DEFAULT_FEATURES)
            raise SchemaMismatchError(f"{where}: transitions need features {missing}, which the dataset does not "
                                      f"hold (its features: {have}; an RL dataset has 'action' and "
                                      f"'{REWARD}', as LeRobot's gym_manipulator records)", feature=missing[0])

        def slot(name: str) -> Slot:
            ft = features[name]
            shape = tuple(int(s) for s in ft["shape"])
            if ft["dtype"] in CAMERA_DTYPES:
                h, w, c = shape if len(shape) == 3 and shape[-1] in (1, 3, 4) else (shape[1], shape[2], shape[0])
                return Slot(name, (c, h, w), "image")
            return Slot(name, () if shape == (1,) else shape, "float32")  # LeRobot's items: 0-d for shape [1]

        info = {k[len(COMPLEMENTARY):]: slot(k) for k in features if k.startswith(COMPLEMENTARY) and k in stored}
        return cls({k: slot(k) for k in keys}, slot(ACTION), info, done=DONE in stored,
                   truncated=TRUNCATED in stored)


_RESERVED = frozenset({*DEFAULT_FEATURES, ACTION, REWARD, DONE, TRUNCATED, "task"})


def host_array(value: Any, what: str) -> np.ndarray:
    """``value`` as numpy on the host (torch tensors on any device), as given: no copy where it is one already."""
    if hasattr(value, "detach"):  # a torch tensor, on any device
        value = value.detach()
        value = (value if value.device.type == "cpu" else value.cpu()).numpy()
    try:
        return np.asarray(value)
    except Exception as exc:  # noqa: BLE001  (whatever numpy cannot take)
        raise ArgumentError(f"{what}: cannot be read as an array ({exc})") from None


def squeezed(value: Any, what: str) -> np.ndarray:
    """``value`` as numpy without a leading dimension of 1 (LeRobot's ``squeeze(0)``); torch tensors too."""
    v = host_array(value, what)
    if v.dtype.kind not in "biuf":
        raise ArgumentError(f"{what}: {v.dtype} values cannot be stored (numbers or bools only)")
    return v[0] if v.ndim and v.shape[0] == 1 else v


_STORED_DTYPES = {"float32": np.dtype(np.float32), "uint8": np.dtype(np.uint8), "bool": np.dtype(np.bool_)}


def as_stored(slot: Slot, value: Any) -> np.ndarray | None:
    """``value`` itself (a view, leading dimension of 1 dropped) when it is a host array or CPU tensor already of
    the slot's stored dtype and shape: what :func:`stored_value` would give, without its conversions; None when
    it needs them (and their checks)."""
    if type(value) is not np.ndarray:
        if getattr(value, "is_cpu", False) is not True:  # a CPU torch tensor, else the checked path
            return None
        try:  # (detach() only where needed: it costs as much as numpy())
            value = value.detach().numpy() if value.requires_grad else value.numpy()
        except (TypeError, RuntimeError):  # dtypes numpy has not (bfloat16...)
            return None
    if value.dtype != _STORED_DTYPES.get(slot.stored):
        return None
    if value.ndim and value.shape[0] == 1:
        value = value[0]
    return value if value.shape == slot.shape else None


def scalar(value: Any, what: str) -> np.ndarray:
    """A reward or flag: one number, in any shape holding one element (LeRobot assigns it to a scalar slot)."""
    v = squeezed(value, what)
    if v.size != 1:
        raise ArgumentError(f"{what}: one value per transition, got shape {v.shape}")
    return v.reshape(())


def numeric_storage(v: np.ndarray) -> str:
    return "bool" if v.dtype == np.bool_ else "uint8" if v.dtype == np.uint8 else "float32"


class Rounding:
    """Warns once per camera whose float frames are not multiples of 1/255 (they are stored rounded). A property
    of the pipeline that makes the frames: checked on the first frames of each camera, then on one in 64."""

    def __init__(self) -> None:
        self.warned: set[str] = set()
        self.seen: dict[str, int] = {}

    def check(self, key: str, frame: np.ndarray, stored: np.ndarray) -> None:
        seen = self.seen[key] = self.seen.get(key, 0) + 1
        if key in self.warned or (seen > 64 and seen % 64):
            return
        back = stored.astype(np.float32) / np.float32(255)
        if not np.array_equal(back, frame):
            self.warned.add(key)
            error = float(np.abs(back - frame).max())
            warn_user(f"state[{key!r}]: camera frames are not multiples of 1/255 (resized or normalized?): they are "
                      f"stored as uint8 images, rounded (max error {error:.4f}), as LeRobot's datasets keep cameras; "
                      f"pass image_storage='float32' to keep them exactly (4x the disk)")


def stored_value(slot: Slot, value: Any, what: str, rounding: Rounding | None = None) -> np.ndarray:
    """One transition's value in the store's representation, checked against its slot."""
    v = squeezed(value, what)
    if v.shape != slot.shape:
        raise SchemaMismatchError(f"{what}: shape {v.shape} (leading 1 dropped), but this buffer holds "
                                  f"{slot.shape} for it", feature=slot.feature)
    if slot.stored == "image":
        if v.dtype.kind != "f":
            raise SchemaMismatchError(f"{what}: camera frames of this buffer are float in [0, 1], got {v.dtype}",
                                      feature=slot.feature)
        v = v.astype(np.float32, copy=False)
        low, high = v.min(), v.max()
        if not (low >= 0 and high <= 1):  # NaN fails both
            raise ValueRangeError(f"{what}: camera frames must be finite and in [0, 1] to be stored as images (got "
                                  f"[{low}, {high}]); image_storage='float32' stores any values", feature=slot.feature)
        scaled = v * np.float32(255)
        out = np.rint(scaled, out=scaled).astype(np.uint8)
        if rounding is not None:
            rounding.check(slot.feature, v, out)
        return out  # CHW: pending frames stay CHW until their commit writes them HWC, a whole episode at a time
    if slot.stored == "bool":
        if v.dtype != np.bool_ and not np.isin(v, (0, 1)).all():
            raise ValueRangeError(f"{what}: this buffer stores it as bool (its first value was), got {v.dtype} "
                                  f"values other than 0/1", feature=slot.feature)
        return v.astype(np.bool_)
    if slot.stored == "uint8":
        if v.dtype != np.uint8:
            raise SchemaMismatchError(f"{what}: this buffer stores it as uint8 (its first value was), got {v.dtype}",
                                      feature=slot.feature)
        return v
    return v.astype(np.float32)


def lerobot_values(slot: Slot, stored: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A batch of one slot's stored values as LeRobot's buffer gives them, into ``out`` if given: float32 of the
    slot's shape (cameras: uint8 HWC frames to float32 CHW, ``k / 255`` as torch computes ``u8.float() / 255``)."""
    if slot.stored == "image" and stored.dtype == np.uint8:
        out = np.empty((len(stored), *slot.shape), dtype=np.float32) if out is None else out
        return to_float32_chw(stored, out)
    values = np.asarray(stored, dtype=np.float32).reshape(len(stored), *slot.shape)
    if out is None:
        return values
    out[...] = values
    return out



def lerobot_published_images(layout: Layout | None) -> set[str]:
    """The state keys that LeRobot's ``ReplayBuffer.to_lerobot_dataset`` publishes as images (its
    ``guess_feature_info``: 3-D values with 3 channels first; with 1 channel its PNG writer fails) and that this
    buffer keeps as float32 numbers."""
    return {k for k, s in (layout.state.items() if layout else ()) if s.stored == "float32" and len(s.shape) == 3
            and s.shape[0] == 3}


def lerobot_png_pixels(key: str, episode: int, frames: np.ndarray) -> np.ndarray:
    """Float32 CHW frames as LeRobot's PNG writer turns them into pixels: ``(v * 255).astype(uint8)`` (truncated,
    not rounded), values in [0, 1] only."""
    v = np.asarray(frames, dtype=np.float32)
    if v.size and not (np.isfinite(v).all() and v.min() >= 0 and v.max() <= 1):
        raise ValueRangeError(f"state[{key!r}], episode {episode}: The image data type is float, which requires "
                              f"values in the range [0.0, 1.0] to be published as LeRobot's images; got "
                              f"[{np.nanmin(v)}, {np.nanmax(v)}] (the buffer keeps them; only its export refuses "
                              f"them)", feature=key, episode=episode)
    return (v * np.float32(255)).astype(np.uint8)


def hwc(frames: np.ndarray) -> np.ndarray:
    """uint8 CHW camera frames (as added) as the store keeps them: HWC (a channel at a time: 3-4x faster than
    numpy's transpose copy of bytes)."""
    out = np.empty((frames.shape[0], *frames.shape[2:], frames.shape[1]), dtype=frames.dtype)
    for c in range(frames.shape[1]):
        out[..., c] = frames[:, c]
    return out
