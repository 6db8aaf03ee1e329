"""Publishing a store whose writer was killed with commits in its log (issue 32): ``push_store`` folds the log
into a format-3 root first, so the bucket holds one whole commit with every logged episode, which any reader
reads."""

from __future__ import annotations

import json

import numpy as np
import s3_fixtures
from rl_reference import check_batch, transitions

import lerobot_zarr
from lerobot_zarr.store.log import LOG_FILE
from lerobot_zarr.store.state import read_state
from lerobot_zarr.writing.sync import push_store
from lerobot_zarr.writing.transitions import TransitionBuffer

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test


def test_a_store_with_a_log_is_published_folded(env, tmp_path):
    buf = TransitionBuffer(tmp_path / "buf")
    for e in range(5):
        for tr in transitions(7, e):
            buf.add(**tr)
    buf._writer._release()  # killed with commits in the log
    root = buf.root
    assert len(read_state(root).log_records) == 5
    want = read_state(root).table
    push_store(root, env.url("rl"), progress=False)
    assert not (root / LOG_FILE).exists()
    remote = json.loads(env.client("rl").read_whole("zarr.json", limit=1 << 26)[0])["attributes"]["lerobot_zarr"]
    assert remote["format_version"] == 3 and remote["info"]["total_episodes"] == 5
    assert LOG_FILE not in env.client("rl").list()
    ds = lerobot_zarr.open_dataset(env.url("rl"), progress=False)
    assert ds.meta.total_episodes == 5 and len(ds) == int(want.length.sum())
    ds.close()
    again = TransitionBuffer(root)
    assert sorted({e for e, _ in check_batch(again.gather(np.arange(len(again))), 7)}) == [0, 1, 2, 3, 4]
    again.close()
