"""Shared helpers for the Hub tests (hub/test_open_from_hub.py, hub/test_repo_errors.py, ...): client settings pointed
at a test HubServer, the real datasets, dataset comparison and parquet row-group byte ranges.

The real ``huggingface_hub`` client is used throughout; only its settings are changed (endpoint, Xet off,
telemetry off, offline flag, token and cache locations isolated per test), never its logic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from huggingface_hub import constants as hf_constants

import lerobot_zarr  # noqa: F401  (sets zarr's rectilinear-chunks switch before anything else touches zarr)

DATASETS_DIR = (Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets").resolve()
#: real dataset folder -> the tag it is served under (LeRobot's revision resolution picks it)
REAL_DATASETS = {"record-test": "v3.0", "open_50": "v3.0", "G1-policy-train": "v2.1"}
#: requests the huggingface_hub client makes on its own, once per process (agent-harness registry)
CLIENT_NOISE = ("/api/agent-harnesses",)


# LeRobot's episode table as write_sample_dataset writes it (one file), and the columns an open reads of it
EPISODE_TABLE = "meta/episodes/chunk-000/file-000.parquet"
TABLE_COLUMNS = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                 "dataset_to_index"]


def episode_table(folder: Path) -> dict:
    """The episode table read whole with pyarrow, in episode order, and each episode's data file and first row in
    it computed here from LeRobot's path template (files hold their episodes in index order)."""
    table = pq.read_table(folder / EPISODE_TABLE).to_pydict()
    order = np.argsort(table["episode_index"])
    out = {c: [table[c][i] for i in order] for c in table}
    first: dict[tuple[int, int], int] = {}
    out["data_file"], out["file_row"] = [], []
    for c, f, start in zip(out["data/chunk_index"], out["data/file_index"], out["dataset_from_index"], strict=True):
        out["data_file"].append(f"data/chunk-{c:03d}/file-{f:03d}.parquet")
        out["file_row"].append(start - first.setdefault((c, f), start))
    return out


def table_bytes_used(folder: Path, episodes) -> int:
    """What opening ``episodes`` uses of the episode table (row groups of 10): its footer, and the needed columns'
    chunks of the row groups holding them and where their data files begin."""
    from lerobot_zarr.lerobot.source_meta import column_ranges

    pf = pq.ParquetFile(folder / EPISODE_TABLE)
    ref = episode_table(folder)
    groups = sorted({g for e in episodes for g in (e // 10, ref["data_file"].index(ref["data_file"][e]) // 10)})
    return pf.metadata.serialized_size + 8 + sum(b - a for a, b in column_ranges(pf, TABLE_COLUMNS, groups))


def real_dataset(name: str) -> Path:
    """Path of a real dataset folder, or skip the test when it is absent."""
    path = DATASETS_DIR / name
    if not (path / "meta" / "info.json").is_file():
        pytest.skip(f"real LeRobot dataset {name!r} not found at {path} (../shared/datasets); skipping")
    return path


@dataclass
class HubEnv:
    """Per-test client settings: where huggingface_hub's and lerobot_zarr's caches live, and the offline switch."""

    endpoint: str
    hf_home: Path
    hf_cache: Path
    zarr_home: Path
    monkeypatch: pytest.MonkeyPatch

    def offline(self, value: bool = True) -> None:
        self.monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", value)


def make_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, endpoint: str) -> HubEnv:
    """Point huggingface_hub (read at call time) and lerobot_zarr at ``endpoint`` and at caches under tmp_path."""
    hf_home = tmp_path / "hf_home"
    hf_cache = hf_home / "hub"
    zarr_home = tmp_path / "zarr_home"
    monkeypatch.setattr(hf_constants, "ENDPOINT", endpoint)
    # hf_hub_download/snapshot_download build file URLs from this template (made at import from HF_ENDPOINT)
    monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_constants, "HF_HOME", str(hf_home))
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(hf_cache))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(hf_home / "token"))
    monkeypatch.setattr(hf_constants, "HF_STORED_TOKENS_PATH", str(hf_home / "stored_tokens"), raising=False)
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(zarr_home))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return HubEnv(endpoint, hf_home, hf_cache, zarr_home, monkeypatch)


def running_server(server):
    """Body of a module-scoped server fixture: the server runs while the tests use it, and none of its requests
    ended in a server-side error."""
    with server:
        yield server
    assert server.errors == [], server.errors[0]


def server_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server) -> Iterator[HubEnv]:
    """Body of a per-test fixture over a shared server: client pointed at it, faults and stats reset, and no
    server-side error left behind."""
    env = make_env(monkeypatch, tmp_path, server.endpoint)
    server.clear_faults()
    server.reset_stats()
    yield env
    server.clear_faults()
    assert server.errors == [], server.errors[0]


def sized_hub(name: str, sizes: tuple[int, ...], repo: str, *, per_file: int, tokens: dict | None = None,
              **dataset):
    """The fixtures ``(hub, env)`` of a test module over repos of several sizes laid out as LeRobot 0.6.1 writes
    them (the episode table in row groups of 10 episodes with per-episode stats columns, one row group per episode
    in data files of ``per_file`` episodes): ``hub``, module-scoped, a server holding ``repo.format(n=n)`` (tag
    ``v3.0``) for each ``n`` of ``sizes``, its folders in ``hub.folders[n]``; ``env``, per test, the client pointed
    at it with the network model off and the stats reset, and no server-side error left behind. ``dataset``: more
    arguments of ``write_sample_dataset`` (default lengths 20-40 frames, seeded by ``n``). Bind them with
    ``hub, env = sized_hub(...)`` (an assignment, so that ruff's F811 does not fire on tests taking ``env``)."""
    from lerobot_zarr.testing.hub_server import HubServer
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    @pytest.fixture(scope="module")
    def hub(tmp_path_factory):
        base = tmp_path_factory.mktemp(name)
        server = HubServer(base / "storage", tokens=tokens)
        server.folders = {}
        for n in sizes:
            src = write_sample_dataset(base / f"src-{n}", n_episodes=n, episodes_per_file=per_file,
                                       episodes_row_group=10, **{"lengths": (20, 40), "seed": n, **dataset})
            server.folders[n] = src
            server.add_repo(repo.format(n=n), src, tags=["v3.0"])
        yield from running_server(server)

    @pytest.fixture
    def env(monkeypatch, tmp_path, hub):
        env = make_env(monkeypatch, tmp_path, hub.endpoint)
        hub.network = None
        hub.reset_stats()
        yield env
        hub.network = None
        assert hub.errors == [], hub.errors[0]

    return hub, env


# ------------------------------------------------------------------------------------------------ requests


def fewest_round_trips(measure: Callable[[int, int], tuple], sizes: tuple[int, ...], tries: int = 4,
                       most: int | None = None) -> dict:
    """``{n: measure(n, attempt)}`` for each size (a tuple whose last item is the round trips counted): while the
    sizes' round trips differ or exceed ``most`` (the bound the test asserts), the size with the most is measured
    again (of those, the one measured fewest times; ``tries`` measures of a size at most) and the fewer kept. Round
    trips are counted with ``settle``, yet a loaded machine can still delay a client thread's request past an
    answer: that adds a round trip, never removes one, so the fewest seen is the structure's. On a quiet machine
    each size is measured once. Only the round trips are re-measured (a measure's other items, and the values it
    checks, are the same at every attempt): ``measure`` may check values at attempt 0 only."""
    counts = {n: measure(n, 0) for n in sizes}
    measured = dict.fromkeys(sizes, 1)
    while True:
        trips = {n: c[-1] for n, c in counts.items()}
        if len(set(trips.values())) == 1 and (most is None or trips[sizes[0]] <= most):
            break
        again = [n for n in sizes if measured[n] < tries]
        if not again:
            break
        worst = max(again, key=lambda n: (trips[n], -measured[n]))
        count = measure(worst, measured[worst])
        measured[worst] += 1
        if count[-1] < trips[worst]:
            counts[worst] = count
    return counts


def lib_requests(server, method: str | None = None, path_contains: str | None = None) -> list:
    """Requests the server saw, without the client's own once-per-process registry fetch."""
    return [r for r in server.requests(method, path_contains) if not any(n in r.path for n in CLIENT_NOISE)]


def resolve_prefix(repo_id: str, commit: str | None = None) -> str:
    """URL-decoded path prefix of file downloads of a dataset repo (optionally at one commit)."""
    return f"/datasets/{repo_id}/resolve/" + (f"{commit}/" if commit else "")


_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


def parse_range(header: str | None, size: int) -> tuple[int, int]:
    """``[start, stop)`` of a ``Range: bytes=s-e`` header (the whole file without one)."""
    if header is None:
        return 0, size
    m = _RANGE.fullmatch(header.strip())
    assert m, f"unexpected Range header {header!r}"
    start = int(m.group(1))
    stop = int(m.group(2)) + 1 if m.group(2) else size
    return start, min(stop, size)


# ------------------------------------------------------------------------------------------------ parquet


@dataclass(frozen=True)
class RowGroup:
    index: int
    start: int  # first byte of its first column chunk
    stop: int  # one past the last byte of its last column chunk
    compressed: int  # sum of the column chunks' total_compressed_size
    num_rows: int


def row_groups(path: Path) -> list[RowGroup]:
    """Byte ranges of a parquet file's row groups, from its footer."""
    md = pq.ParquetFile(path).metadata
    out = []
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        cols = [rg.column(j) for j in range(rg.num_columns)]
        starts = [c.dictionary_page_offset if c.has_dictionary_page and c.dictionary_page_offset is not None
                  else c.data_page_offset for c in cols]  # fmt: skip
        stops = [s + c.total_compressed_size for s, c in zip(starts, cols, strict=True)]
        out.append(RowGroup(i, min(starts), max(stops), sum(c.total_compressed_size for c in cols), rg.num_rows))
    return out


def footer_size(path: Path) -> int:
    """Bytes of the parquet footer (metadata + length + magic)."""
    return pq.ParquetFile(path).metadata.serialized_size + 8


def column_chunk_ranges(path: Path, prefix: str) -> list[tuple[int, int]]:
    """Byte ranges ``[start, stop)`` of the column chunks whose path starts with ``prefix`` (all row groups)."""
    md = pq.ParquetFile(path).metadata
    out = []
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        for j in range(rg.num_columns):
            c = rg.column(j)
            if c.path_in_schema.startswith(prefix):
                start = (c.dictionary_page_offset if c.has_dictionary_page and c.dictionary_page_offset is not None
                         else c.data_page_offset)  # fmt: skip
                out.append((start, start + c.total_compressed_size))
    return out


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


# ------------------------------------------------------------------------------------------------ comparison


def assert_same_frames(got, want, what: str = "") -> None:
    """Two open datasets hold the same frames: every feature (and the task strings), bit for bit."""
    assert len(got) == len(want), f"{what}: {len(got)} frames, expected {len(want)}"
    assert list(got.episodes) == list(want.episodes), what
    idx = np.arange(len(want))
    a, b = got.get_batch(idx), want.get_batch(idx)
    assert sorted(a) == sorted(b), f"{what}: keys {sorted(a)} != {sorted(b)}"
    for key in b:
        if key == "task":
            assert list(a[key]) == list(b[key]), f"{what}: task strings differ"
            continue
        x, y = np.asarray(a[key]), np.asarray(b[key])
        assert x.dtype == y.dtype and x.shape == y.shape, f"{what}: {key} {x.dtype}{x.shape} != {y.dtype}{y.shape}"
        # bit for bit (NaNs included)
        assert x.tobytes() == y.tobytes(), f"{what}: feature {key!r} differs"
    assert got.meta.tasks == want.meta.tasks, what
    assert np.array_equal(got.meta.episode_length, want.meta.episode_length), what


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in Path(root).rglob("*") if p.is_file()) if Path(root).exists() else []


def no_hf_data_copies(env: HubEnv) -> None:
    """Nothing of the data went through huggingface_hub's cache or a local_dir copy."""
    parquet = [p for p in files_under(env.hf_home) if p.suffix == ".parquet"]
    assert parquet == [], f"parquet files under HF_HOME: {parquet[:5]}"
    cached = files_under(env.hf_cache)
    assert cached == [], f"files in the huggingface_hub cache: {cached[:5]}"
    for base in (env.hf_home, env.zarr_home):
        local_dir_meta = [p for p in Path(base).rglob(".cache")] if Path(base).exists() else []
        assert local_dir_meta == [], f"local_dir download metadata found: {local_dir_meta[:5]}"
    zarr_parquet = [p for p in files_under(env.zarr_home) if p.suffix in (".parquet", ".mp4")]
    assert zarr_parquet == [], f"source files copied into the store folder: {zarr_parquet[:5]}"


