"""The doctor's report of one dataset (:class:`DoctorReport`): its findings, which episodes were checked, as text
(one line each, summary first) and as JSON."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .kinds import KINDS, SEVERITIES, THRESHOLDS, Defect, check_kinds

__all__ = ["DoctorReport"]

_ORDER = {k: i for i, k in enumerate(KINDS)}


def _key(d: Defect) -> tuple:
    return (d.episode is not None, d.episode or 0, _ORDER[d.kind], d.feature or "", d.frames)


@dataclass
class DoctorReport:
    """What the doctor found in a dataset: ``defects`` (:class:`~lerobot_zarr.doctor.kinds.Defect`, the dataset's
    own first, then by episode), the episodes ``checked`` (half-open runs; the others were not: not in the store
    yet, made without the doctor, or changed since), ``notes`` on what could not be checked and why, and the
    ``thresholds`` applied. Iterating gives the defects; ``len()`` counts them. Nothing here changes the data:
    :meth:`episodes` gives those to drop (``edit --drop-defective``, ``ds.drop_defective``)."""

    name: str
    total_episodes: int
    checked: tuple[tuple[int, int], ...]
    defects: list[Defect] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=lambda: dict(THRESHOLDS))

    def __post_init__(self) -> None:
        self.defects = sorted(self.defects, key=_key)

    def __iter__(self) -> Iterator[Defect]:
        return iter(self.defects)

    def __len__(self) -> int:
        return len(self.defects)

    @property
    def checked_episodes(self) -> int:
        return sum(b - a for a, b in self.checked)

    def counts(self) -> dict[str, int]:
        """Findings per kind, in the order of :data:`~lerobot_zarr.doctor.kinds.KINDS`."""
        found = Counter(d.kind for d in self.defects)
        return {k: found[k] for k in KINDS if found[k]}

    def of(self, kinds: Iterable[str] | None = None) -> list[Defect]:
        """The findings of these kinds (None: all)."""
        chosen = set(check_kinds(kinds))
        return [d for d in self.defects if d.kind in chosen]

    def episodes(self, kinds: Iterable[str] | None = None) -> list[int]:
        """The episodes with a finding of these kinds (None: any kind whose findings name episodes), sorted; a kind
        of the dataset as a whole is refused (dropping episodes does not remove it)."""
        chosen = set(check_kinds(kinds, droppable=True))
        return sorted({d.episode for d in self.defects if d.kind in chosen and d.episode is not None})

    def summary(self) -> str:
        """One line: what was checked and how many findings of each severity and kind."""
        by_severity = Counter(d.severity for d in self.defects)
        checked = self.checked_episodes
        head = (f"{self.name}: {self.total_episodes} episodes"
                + ("" if checked == self.total_episodes else f", {checked} checked"))
        if not self.defects:
            return f"{head}: no defect found"
        episodes = len({d.episode for d in self.defects if d.episode is not None})
        severities = ", ".join(f"{by_severity[s]} {s}{'s' if by_severity[s] > 1 else ''}" for s in SEVERITIES
                               if by_severity[s])
        kinds = ", ".join(f"{k} {n}" for k, n in self.counts().items())
        return f"{head}: {severities} in {episodes} episodes ({kinds})"

    def lines(self) -> list[str]:
        """The summary, the notes, then one line per finding."""
        return [self.summary(), *(f"note: {n}" for n in self.notes), *(d.line() for d in self.defects)]

    def text(self) -> str:
        return "\n".join(self.lines())

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"DoctorReport({self.summary()!r})"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "total_episodes": self.total_episodes,
                "checked": [list(r) for r in self.checked], "summary": self.summary(), "counts": self.counts(),
                "notes": list(self.notes), "thresholds": dict(self.thresholds),
                "defects": [d.to_json() for d in self.defects]}

