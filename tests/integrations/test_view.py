"""Viewing an episode: a PNG figure (checked as a PNG with the expected panels) and a rerun recording."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("matplotlib", reason="the viz extra (matplotlib) is not installed")

from lerobot_zarr.cli import main
from lerobot_zarr.integrations.view import dimension_names, view_episode
from lerobot_zarr.testing.sample_data import write_sample_dataset

ROW_PX = round(2.8 * 80)  # figure height per panel row at the figure's dpi


@pytest.fixture
def source(tmp_path, monkeypatch):
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "home"))
    return write_sample_dataset(tmp_path / "src", n_episodes=3, image_keys=("observation.images.cam",),
                                image_shape=(24, 32, 3), extra_nd=True)


def test_png_has_a_panel_per_feature_and_camera(source, tmp_path):
    png = view_episode(source, 1, out=tmp_path / "ep.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(png) as img:
        width, height = img.size
        pixels = np.asarray(img.convert("L"))
    # state, action and the 3x4 grid are vector panels; one camera row; no other scalar than LeRobot's columns
    assert (width, height) == (12 * 80, 4 * ROW_PX)
    assert pixels.std() > 10, "the figure is blank"
    assert 20_000 < png.stat().st_size < 2_000_000


def test_dimension_names():
    assert dimension_names([["a", "b"], ["c"]], 3) == ["a", "b", "c"]
    assert dimension_names({"motors": ["x", "y"]}, 2) == ["x", "y"]
    assert dimension_names(None, 2) == ["dim_0", "dim_1"]
    assert dimension_names(["height", "width"], 3) == ["dim_0", "dim_1", "dim_2"]


def test_cli_writes_png(source, tmp_path):
    out = tmp_path / "cli.png"
    assert main(["view", str(source), "--episode", "2", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_rrd_round_trips_through_rerun(source, tmp_path):
    pytest.importorskip("rerun", reason="rerun-sdk (viz extra) is not installed")
    from rerun.chunk import RrdReader

    rrd = tmp_path / "ep.rrd"
    view_episode(source, 0, out=tmp_path / "ep.png", rrd=rrd)
    reader = RrdReader(rrd)
    assert [r.recording_id for r in reader.recordings()] == ["episode_0"]
    rows: dict[str, int] = {}
    for chunk in reader.stream():
        rows[chunk.entity_path] = rows.get(chunk.entity_path, 0) + chunk.num_rows
    import lerobot_zarr

    n = int(lerobot_zarr.open_dataset(source, progress=False).meta.episode_length[0])
    assert rows["/action/joint_0"] == n and rows["/observation.state/joint_5"] == n
    assert rows["/observation.images.cam"] == n


def test_view_from_the_hub_fetches_only_that_episode(source, tmp_path, monkeypatch):
    import huggingface_hub.constants as hf_constants
    import pyarrow.parquet as pq

    from lerobot_zarr.testing.hub_server import HubServer

    with HubServer(tmp_path / "server") as server:
        server.add_repo("org/view", source, tags=["v3.0"])
        monkeypatch.setattr(hf_constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
        png = view_episode("org/view", 2, out=tmp_path / "hub.png")
        assert png.read_bytes()[:4] == b"\x89PNG"
        data = "data/chunk-000/file-000.parquet"
        footer = pq.ParquetFile(source / data).metadata
        rg = [footer.row_group(i) for i in range(footer.num_row_groups)]
        own = sum(rg[2].column(c).total_compressed_size for c in range(rg[2].num_columns))
        others = sum(g.column(c).total_compressed_size for g in rg[:2] for c in range(g.num_columns))
        sent = sum(r.bytes_sent for r in server.requests("GET") if r.path.endswith(data))
        assert sent < own + 20_000 + others / 2, (sent, own, others)  # its row group + footer reads, not the others


def test_wide_vectors_are_split_into_panels_with_legends(tmp_path, monkeypatch):
    """26-d state/action (as the G1 robot has): 3 panels each of at most 12 named lines, each with a legend."""
    import matplotlib.pyplot as plt

    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "home"))
    src = write_sample_dataset(tmp_path / "wide", n_episodes=2, state_dim=26, action_dim=26)
    legends = []
    real_savefig = plt.Figure.savefig

    def spy(fig, *args, **kwargs):
        legends.extend(len(ax.get_legend().get_texts()) for ax in fig.axes if ax.get_legend() is not None)
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", spy)
    png = view_episode(src, 0, out=tmp_path / "wide.png")
    with Image.open(png) as img:
        assert img.size[1] == 6 * ROW_PX  # 3 + 3 vector panels, no camera, no other scalar
    assert sorted(legends) == [8, 8, 9, 9, 9, 9], legends  # 26 = 9 + 8 + 9 named lines per vector


def test_serve_to_a_rerun_viewer_without_a_display(source, tmp_path):
    """--serve: the episode is served over gRPC on a local port (checked by connecting to it), no display needed."""
    pytest.importorskip("rerun", reason="rerun-sdk (viz extra) is not installed")
    import socket
    from urllib.parse import urlparse

    from lerobot_zarr.integrations.view import _log_rerun

    ds = __import__("lerobot_zarr").open_dataset(source, episodes=[0], progress=False)
    arrays = ds.episode(0)
    recordings = _log_rerun(None, 0, arrays, ds.meta.features, ds.meta.fps, ["action"], [],
                            ["observation.images.cam"], live="serve", wait=False)
    url = urlparse(recordings[0].url.replace("rerun+http", "http"))
    with socket.create_connection((url.hostname, url.port), timeout=5):
        pass
    for rec in recordings:
        rec.disconnect()
