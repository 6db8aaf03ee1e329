"""What a one-episode open of a LeRobot-written Hub repo costs: the modules it imports and the bytes it reads.

Repos laid out as LeRobot 0.6.1 writes them (the episode table in row groups of 10 episodes with per-episode stats
columns, one row group per episode in the data files), at two sizes. The request and round-trip counts are
tests/hub/test_round_trip_count.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
from hub_fixtures import assert_same_frames, lib_requests, parse_range, resolve_prefix, sized_hub

import lerobot_zarr
from lerobot_zarr.lerobot import range_files, source_meta
from lerobot_zarr.lerobot.source_meta import column_ranges

SIZES = (40, 400)
PER_FILE = 20
TABLE = "meta/episodes/chunk-000/file-000.parquet"
EPISODE_COLUMNS = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                   "dataset_to_index"]
# modules a one-episode open does not need: pandas (pyarrow's to_numpy imports it, ~0.2 s), pyarrow.compute
# (pyarrow's list flatten), huggingface_hub's HfApi module (~0.1 s), tqdm.auto and asyncio (huggingface_hub's bars)
HEAVY = ("pandas", "pyarrow.compute", "huggingface_hub.hf_api", "tqdm.auto", "asyncio")
ROOT = Path(__file__).resolve().parents[2]


hub, env = sized_hub("hub_cost", SIZES, "org/cost-{n}", per_file=PER_FILE)


def test_one_episode_open_imports_nothing_heavy_it_does_not_need(hub, tmp_path):
    code = (f"import sys, json, lerobot_zarr\n"
            f"ds = lerobot_zarr.open_dataset('org/cost-40', episodes=[23], root=sys.argv[1], progress=False)\n"
            f"assert ds.episodes.tolist() == [23] and len(ds) > 0\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf"), LEROBOT_ZARR_HOME=str(tmp_path / "home"),
               HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "root")], env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _bytes_by_file(hub, repo: str) -> dict[str, list[tuple[int, int]]]:
    prefix = resolve_prefix(repo)
    out: dict[str, list[tuple[int, int]]] = {}
    for r in lib_requests(hub, "GET", prefix):
        if r.status == 404:  # our index file, looked for with the listing
            continue
        rel = r.path[len(prefix):].split("/", 1)[1]  # after the commit
        size = (hub.folders[int(repo.rsplit("-", 1)[1])] / rel).stat().st_size
        start, stop = parse_range(r.range, size)
        assert r.bytes_sent == stop - start
        out.setdefault(rel, []).append((start, stop))
    return out


def test_one_episode_open_reads_each_byte_once_and_beyond_the_episode_table_what_it_uses(hub, env, tmp_path):
    """The episode table is read once: whole when small, else its footer and the row groups the open needs (within
    2x of what it uses of it: the store leaves the others' episodes unresolved); every other file within 2x of what the open uses (metadata files, the data file's footer and the episode's row
    group), and as much at 400 episodes as at 40. Values bit-exact against a local open."""
    beyond = {}
    for n in SIZES:
        k = n // 2 + 3
        hub.reset_stats()
        ds = lerobot_zarr.open_dataset(f"org/cost-{n}", episodes=[k], root=tmp_path / f"hub-{n}", progress=False)
        read = _bytes_by_file(hub, f"org/cost-{n}")
        local = lerobot_zarr.open_dataset(hub.folders[n], episodes=[k], root=tmp_path / f"local-{n}", progress=False)
        assert_same_frames(ds, local, f"{n} episodes")  # (meta's lengths read: the store resolved, after the count)
        folder = hub.folders[n]
        table = pq.ParquetFile(folder / TABLE)
        groups = sorted({k // 10, k // PER_FILE * PER_FILE // 10})  # its row group, where its data file begins
        needed = table.metadata.serialized_size + 8 + sum(b - a for a, b in column_ranges(table, EPISODE_COLUMNS,
                                                                                            groups))
        table_read, size = sum(b - a for a, b in read.pop(TABLE)), (folder / TABLE).stat().st_size
        if size < source_meta._FOOTER_FIRST_MIN:  # a small table: whole, with the other metadata files
            assert table_read == size, (n, table_read, size)
        else:  # its footer, then the row groups the open needs
            assert table_read <= 2 * needed, (n, needed, table_read)
        data = f"data/chunk-000/file-{k // PER_FILE:03d}.parquet"
        pf = pq.ParquetFile(folder / data)
        row = k % PER_FILE  # one row group per episode
        group = column_ranges(pf, pf.schema_arrow.names, [row])
        uses = {rel: (folder / rel).stat().st_size for rel in read if rel != data}
        # the footer comes with a tail read of at least _FOOTER_GUESS (one request either way; these files are small)
        tail = max(pf.metadata.serialized_size + 8, min((folder / data).stat().st_size, range_files._FOOTER_GUESS))
        uses[data] = tail + sum(b - a for a, b in group)
        got = {rel: sum(b - a for a, b in ranges) for rel, ranges in read.items()}
        assert set(got) == set(uses) and all(got[rel] <= 2 * uses[rel] for rel in got), (n, got, uses)
        for rel, ranges in read.items():  # no byte twice
            ordered = sorted(ranges)
            assert all(a[1] <= b[0] for a, b in zip(ordered, ordered[1:], strict=False)), (rel, ordered)
        beyond[n] = sum(got.values())
    assert beyond[SIZES[1]] <= 1.5 * beyond[SIZES[0]], beyond
