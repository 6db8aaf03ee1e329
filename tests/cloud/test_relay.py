"""Object storage from a forked process (:mod:`lerobot_zarr.cloud.relay`): every Bucket call of a process forked from
one whose obstore engine ran goes through a fetcher process of its own and gives what the call gives in the parent
(the same bytes, infos, listings and typed errors); the fetcher ends with its process; an answer over the bound, a
fetcher gone or silent is a BucketError, never a hang or a body of unbounded size (a fake fetcher checks those)."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
import warnings

import pytest
import s3_fixtures

from lerobot_zarr.cloud import relay
from lerobot_zarr.errors import BucketError, CommitConflictError, ObjectChangedError, SourceNotFoundError

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork here")


def _calls(bucket) -> dict:
    """Every kind of call, and the errors that must cross as themselves."""
    out = {"read": bucket.read("a/k", 3, 70_000), "read_whole": bucket.read_whole("a/k", limit=1 << 20),
           "read_head": bucket.read_head("a/k", 10), "head": bucket.head("a/k"), "none": bucket.head("a/missing"),
           "list": bucket.list("a"), "read_many": bucket.read_many("a/k", [(0, 5), (100, 200), (5000, 9000)])}
    for name, call, error in (
            ("missing", lambda: bucket.read("a/missing", 0, 4), SourceNotFoundError),
            ("changed", lambda: bucket.read("a/k", 0, 4, etag='"0123"'), ObjectChangedError),
            ("conflict", lambda: bucket.write("a/k", b"x", if_absent=True), CommitConflictError)):
        try:
            call()
            out[name] = "no error"
        except error as exc:
            out[name] = (type(exc).__name__, exc.path)
    return out


def _in_fork(bucket, out):
    try:
        got = _calls(bucket)
        got["write"] = bucket.write("a/new", b"from the child")
        got["new"] = bucket.read_whole("a/new", limit=100)[0]
        bucket.delete("a/new")
        got["deleted"] = bucket.head("a/new")
        got["fetcher"] = relay._current[0].proc.pid
        out.put(pickle.dumps(got))
    except Exception as exc:  # (reported to the test, which fails naming it)
        out.put(pickle.dumps(repr(exc)))


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie: ended (its reaper is elsewhere)
    except FileNotFoundError:
        return True


def test_a_forked_process_gets_what_the_parent_gets_through_its_fetcher(env):
    bucket = env.client()
    bucket.write("a/k", os.urandom(80_000))
    want = _calls(bucket)  # (the parent's engine runs: a fork cannot use one)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    with warnings.catch_warnings():  # (Python warns of a fork in a process with threads: that is the case here)
        warnings.simplefilter("ignore", DeprecationWarning)
        proc = ctx.Process(target=_in_fork, args=(bucket, out))
        proc.start()
    got = pickle.loads(out.get(timeout=120))
    proc.join(timeout=60)
    assert isinstance(got, dict), got
    assert {k: got[k] for k in want} == want
    assert got["new"] == b"from the child" and got["write"].startswith('"') and got["deleted"] is None
    deadline = time.monotonic() + 60
    while not _gone(got["fetcher"]):  # the fetcher ends with the process it served
        assert time.monotonic() < deadline, "the fetcher outlived its process"
        time.sleep(0.05)


class _FakeFetcher:
    """The far end of a fetcher's socket, answering each request with ``answer(header)``: (header, body) to send,
    or None to close the socket."""

    def __init__(self, answer):
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        self.fetcher = relay._Fetcher(ours, self.proc)
        threading.Thread(target=self._serve, args=(theirs, answer), daemon=True).start()

    @staticmethod
    def _serve(sock, answer):
        while True:
            head = relay.recv_exactly(sock, relay.FRAME.size)
            if head is None:
                return
            hlen, blen = relay.FRAME.unpack(head)
            header = json.loads(relay.recv_exactly(sock, hlen))
            relay.recv_exactly(sock, blen)
            reply = answer(header)
            if reply is None:
                sock.close()
                return
            if reply == "silent":
                continue
            out, body = reply
            text = json.dumps({**out, "id": header["id"]}).encode()
            sock.sendall(relay.FRAME.pack(len(text), len(body)) + text + body)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait(timeout=60)
        self.fetcher.sock.close()

    def call(self, limit=100, deadline=60.0):
        return self.fetcher.call({"op": "read", "rel": "k"}, b"", limit, deadline, "s3://b/k")


def test_an_answer_over_its_bound_ends_the_fetcher():
    with _FakeFetcher(lambda h: ({"size": 10, "etag": '"e"'}, b"x" * 101)) as fake:
        with pytest.raises(BucketError, match="an answer of 101 bytes to a request of at most 100"):
            fake.call(limit=100)
        assert fake.proc.wait(timeout=60) == -9  # killed
        with pytest.raises(BucketError, match="failed"):  # and no other request is sent to it
            fake.call()


def test_a_fetcher_gone_fails_its_requests_at_once_and_a_silent_one_at_the_deadline():
    with _FakeFetcher(lambda h: None) as fake, pytest.raises(BucketError, match="fetcher of this forked process "
                                                                              "failed"):
        fake.call(deadline=600)  # (not the deadline's message)
    with _FakeFetcher(lambda h: "silent") as fake, pytest.raises(BucketError, match=r"no answer from the object "
                                                                                  r"storage fetcher .* within 0.5 s"):
        fake.call(deadline=0.5)


def test_errors_cross_typed_and_unknown_ones_as_bucket_errors():
    changed = {"error": "ObjectChangedError", "message": "s3://b/k: changed", "path": "s3://b/k"}
    with _FakeFetcher(lambda h: (changed, b"")) as fake, pytest.raises(ObjectChangedError, match="changed") as caught:
        fake.call()
    assert caught.value.path == "s3://b/k"
    with _FakeFetcher(lambda h: ({"error": "SystemExit", "message": "odd"}, b"")) as fake, \
            pytest.raises(BucketError, match="odd") as caught:
        fake.call()
    assert type(caught.value) is BucketError
