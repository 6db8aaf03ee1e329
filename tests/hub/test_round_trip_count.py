"""A partial open of a Hub repo waits for a bounded number of round trips, whatever the repo's number of episodes.

The repos are laid out as LeRobot 0.6.1 writes them (the episode table in row groups of 10 episodes with
per-episode stats columns; one row group per episode in the data files), at two sizes, and once more pushed by us
(with our index file). The test Hub models a network (a delay per request, and an answer waits until the client has
sent all it can without it: ``settle``), so that requests sent together overlap, however a loaded machine delays
one of the client's threads, and :meth:`HubStats.round_trips` counts the ones the client waited for one after the
other. Also: the network model itself (delay, shared link, settling) and the round-trip count.
"""

from __future__ import annotations

import threading
import time

from hub_fixtures import CLIENT_NOISE, assert_same_frames, fewest_round_trips, lib_requests, sized_hub

import lerobot_zarr
from lerobot_zarr import LeRobotZarrDataset
from lerobot_zarr.testing.hub_server import NetworkModel

TOKEN = "rt-token"
SIZES = (40, 1000)  # episodes: the request and round-trip counts of a one-episode open must not depend on it
PER_FILE = 20  # data files bigger than the tail read for their footer: the row group is a request of its own
MODEL = NetworkModel(latency_s=0.05, rate=1e9, settle=True)


hub, env = sized_hub("hub_rtt", SIZES, "org/lerobot-{n}", per_file=PER_FILE, tokens={TOKEN: "alice"})


def _open_counted(hub, repo: str, episode: int, root) -> tuple[LeRobotZarrDataset, int, int]:
    """Open one episode over the modelled network: the dataset, its requests and its round trips."""
    hub.reset_stats()
    hub.network = MODEL
    try:
        ds = lerobot_zarr.open_dataset(repo, episodes=[episode], root=root, progress=False)
    finally:
        hub.network = None
    return ds, len(lib_requests(hub)), hub.stats.round_trips(exclude=CLIENT_NOISE)


def test_episode_table_is_laid_out_as_lerobot_writes_it(hub):
    import pyarrow.parquet as pq

    md = pq.ParquetFile(hub.folders[1000] / "meta/episodes/chunk-000/file-000.parquet").metadata
    assert md.num_row_groups == 100 and {md.row_group(g).num_rows for g in range(100)} == {10}
    names = pq.ParquetFile(hub.folders[1000] / "meta/episodes/chunk-000/file-000.parquet").schema_arrow.names
    assert "stats/action/q99" in names and "stats/observation.state/mean" in names


def test_lerobot_written_repo_opens_in_a_bounded_number_of_round_trips(hub, env, tmp_path):
    def measure(n: int, attempt: int) -> tuple[int, int]:
        k = n // 2 + 3  # in a middle data file
        ds, requests, trips = _open_counted(hub, f"org/lerobot-{n}", k, tmp_path / f"lerobot-{n}-{attempt}")
        if attempt == 0:  # the frames once (a re-measure counts round trips only)
            local = lerobot_zarr.open_dataset(hub.folders[n], root=tmp_path / f"local-{n}", episodes=[k],
                                              progress=False)
            assert_same_frames(ds, local, f"{n} episodes")
        return requests, trips

    counts = fewest_round_trips(measure, SIZES, most=4)
    # revision, listing (with our index's name), the metadata files together with the episode table (whole under
    # 1 MiB, at 40 episodes; else its footer, whose statistics do not give these episodes' lengths of 20-40 frames),
    # then (a table read footer first) the row groups holding the episode and where its data file begins, together
    # with the data file's footer and the bytes where the episode's row group is estimated to lie: as many round
    # trips at 1,000 episodes as at 40, a request more for those row groups (before: a request per row group of the
    # episode table; then the table whole, 3.8x the bytes the open uses of it)
    assert counts[SIZES[0]][1] == counts[SIZES[1]][1] <= 4, counts
    assert counts[SIZES[1]][0] <= counts[SIZES[0]][0] + 1, counts


def test_reopen_for_an_episode_of_another_data_file_in_four_round_trips(hub, env, tmp_path):
    n = SIZES[1]
    first, then = n // 2 + 3, PER_FILE * (n // PER_FILE // 4) + 1  # then: near the start of another data file (not
    # in the tail read for its footer)

    def measure(n: int, attempt: int) -> tuple[int, int]:
        root = tmp_path / f"lerobot-{n}-{attempt}"
        lerobot_zarr.open_dataset(f"org/lerobot-{n}", episodes=[first], root=root, progress=False)
        ds, requests, trips = _open_counted(hub, f"org/lerobot-{n}", then, root)
        if attempt == 0:
            local = lerobot_zarr.open_dataset(hub.folders[n], root=tmp_path / f"local-{n}", episodes=[then],
                                              progress=False)
            assert_same_frames(ds, local, f"a reopen, {n} episodes")
        return requests, trips

    counts = fewest_round_trips(measure, (n,), most=4)
    # revision, listing, the metadata files with the episode table's footer, then its row groups together with the
    # data file's footer and the bytes where the episode's rows are estimated to lie (the table's footer tells the
    # file and bounds its rows); before: the data file's footer after the table's row groups, then its row group
    assert counts[n][1] <= 4, counts


def test_pushed_repo_opens_in_three_round_trips(hub, env, tmp_path):
    counts = {}
    for n in SIZES:
        local = lerobot_zarr.open_dataset(hub.folders[n], root=tmp_path / f"local-{n}", progress=False)
        local.push(f"org/pushed-{n}", token=TOKEN, progress=False)
        k = n // 2 + 3
        ds, requests, trips = _open_counted(hub, f"org/pushed-{n}", k, tmp_path / f"pushed-{n}")
        assert_same_frames(ds, LeRobotZarrDataset(local.root, episodes=[k]), f"pushed, {n} episodes")
        counts[n] = (requests, trips)
    # revision, our index with the listing (footers inlined), the row group
    assert counts[SIZES[0]] == counts[SIZES[1]] == (4, 3), counts


def test_inspect_of_a_lerobot_written_repo_in_three_round_trips(hub, env):
    hub.network = MODEL
    try:
        meta = lerobot_zarr.inspect("org/lerobot-1000")
    finally:
        hub.network = None
    assert meta.total_episodes == 1000
    assert hub.stats.round_trips(exclude=CLIENT_NOISE) == 3  # revision, listing, metadata files together


# ------------------------------------------------------------------------------------------------ the model


def _get(url: str) -> bytes:
    from huggingface_hub.utils import get_session

    response = get_session().get(url)
    response.raise_for_status()
    return response.content


def test_network_model_delays_each_request_and_shares_one_link(hub, env):
    url = f"{hub.endpoint}/datasets/org/lerobot-1000/resolve/main/meta/episodes/chunk-000/file-000.parquet"
    size = len(_get(url))
    assert size > 200_000
    hub.network = NetworkModel(latency_s=0.1, rate=size / 0.4)  # one file: 0.4 s on the link
    t0 = time.monotonic()
    threads = [threading.Thread(target=_get, args=(url,)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    hub.network = None
    # both bodies crossed one link: 0.8 s, after the 0.1 s delay; not 0.4 s as with a link each (a loaded machine
    # only adds to it)
    assert elapsed >= 0.85, elapsed
    hub.reset_stats()
    hub.network = NetworkModel(latency_s=0.1, rate=1e9)
    t0 = time.monotonic()
    _get(f"{hub.endpoint}/api/datasets/org/lerobot-40/refs")
    assert time.monotonic() - t0 >= 0.1
    hub.network = None


def test_round_trips_count_requests_one_after_the_other(hub, env):
    from lerobot_zarr.testing.hub_server import HubStats, RequestRecord

    def stats(*spans: tuple[float, float]) -> HubStats:
        out = HubStats()
        for started, ended in spans:
            out.add(RequestRecord("GET", "/x", "", None, started=started, ended=ended))
        return out

    assert stats((0, 1), (1, 2), (2.5, 3)).round_trips() == 3  # one after the other (a reply, then a request)
    assert stats((0, 1), (0.1, 1.1), (0.2, 0.9), (1.2, 2)).round_trips() == 2  # three together, then one
    assert stats((0, 5), (0, 1), (1, 2), (2, 3)).round_trips() == 3  # a long one beside a chain of three
    assert stats().round_trips() == 0
    hub.network = NetworkModel(latency_s=0.1, rate=1e9)
    url = f"{hub.endpoint}/api/datasets/org/lerobot-40/refs"
    for _ in range(3):
        _get(url)
    assert hub.stats.round_trips() == 3
    hub.reset_stats()
    threads = [threading.Thread(target=_get, args=(url,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hub.network = None
    assert len(hub.requests()) == 4 and hub.stats.round_trips() < 4  # (together: 1 on a quiet machine)
    assert hub.stats.round_trips(exclude=("/refs",)) == 0


def _busy(seconds: float, at_most_s: float = 1.5) -> None:
    """Run on a CPU for ``seconds`` of this thread's CPU time (a thread the scheduler or a collection delays), or
    ``at_most_s`` of the clock on a machine so loaded that it gets less: past 5 s (``settle``'s limit for a busy
    thread) the others would be answered without it. (Spinning on the clock alone holds the GIL so that the other
    client threads send late too.)"""
    end, until = time.thread_time() + seconds, time.monotonic() + at_most_s
    while time.thread_time() < end and time.monotonic() < until:
        pass


def test_settled_answers_wait_for_a_delayed_client_thread(hub, env):
    # four requests sent together, one of them after its thread ran 0.3 s: without settling, the three others are
    # answered after the 0.05 s latency and the late one counts as a second round trip
    url = f"{hub.endpoint}/api/datasets/org/lerobot-40/refs"
    hub.network = NetworkModel(latency_s=0.05, rate=1e9, settle=True)
    threads = [threading.Thread(target=_get, args=(url,)) for _ in range(3)]
    threads.append(threading.Thread(target=lambda: (_busy(0.3), _get(url))))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hub.network = None
    assert len(hub.requests()) == 4 and hub.stats.round_trips() == 1
    hub.reset_stats()
    hub.network = NetworkModel(latency_s=0.05, rate=1e9, settle=True)
    for _ in range(3):  # one after the other: still three
        _get(url)
    hub.network = None
    assert hub.stats.round_trips() == 3
