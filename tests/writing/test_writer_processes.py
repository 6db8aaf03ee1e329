"""Writer durability: SIGKILL a writer at random moments, read while it writes, evict under a long-lived reader,
and the writer lock of dead, live and forked writers.

Every episode is self-describing: ``obs.seed`` (constant over the episode) regenerates its content and ``obs.row``
is the frame's row in that generated episode (rows disappear with ``delete_frames``), so any reader can check any
episode bit-exactly against :func:`generate` without knowing the writer's history. Test 1 also keeps a model of the
committed episodes (from the operations the writer reported done) and checks the store against it after each kill.

Writer processes for the kill loop are forked from a "zygote" subprocess that imported lerobot_zarr once (a fork
costs milliseconds, a fresh interpreter ~0.2 s); the other tests start plain subprocesses. Each writer reports
progress by appending whole lines (one ``write`` each) to a log file: ``begin <op json>`` before an operation,
``done`` once it returned (i.e. committed).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import lerobot_zarr
from lerobot_zarr import LeRobotZarrDataset, StoreLockedError
from lerobot_zarr.store.state import chunk_path, has_commit_point, read_state, retired_path
from lerobot_zarr.writing.transaction import MIN_FREE_ENV

REPO = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------------------------
# What an episode holds: shared verbatim by this module and the writer processes.
# ---------------------------------------------------------------------------------------------------------------
COMMON = textwrap.dedent('''
    import numpy as np

    FPS = 10
    STATE = "observation.state"
    IMAGE = "observation.images.cam"
    FEATURES = {
        "obs.seed": {"dtype": "int64", "shape": [1]},
        "obs.row": {"dtype": "int64", "shape": [1]},
        STATE: {"dtype": "float32", "shape": [14]},
        IMAGE: {"dtype": "image", "shape": [6, 8, 3]},
    }
    PACK_BYTES = 6 * 8 * 3 * 32  # packs of 32 frames: the writers cross pack boundaries all the time


    def episode_length(seed):
        return 3 + (seed * 7) % 20


    def task_of(seed):
        return f"task {seed % 3}"


    def generate(seed):
        """The frames of the episode recorded with ``seed`` (deterministic)."""
        n = episode_length(seed)
        rng = np.random.default_rng(seed)
        return {"obs.seed": np.full(n, seed, dtype=np.int64), "obs.row": np.arange(n, dtype=np.int64),
                STATE: rng.standard_normal((n, 14), dtype=np.float32),
                IMAGE: rng.integers(0, 256, (n, 6, 8, 3), dtype=np.uint8)}
''')
_common: dict = {}
exec(compile(COMMON, "<COMMON>", "exec"), _common)
FPS, STATE, IMAGE, FEATURES = _common["FPS"], _common["STATE"], _common["IMAGE"], _common["FEATURES"]
PACK_BYTES = _common["PACK_BYTES"]
HANG_S = 600  # a bound that only stops a hang: loops end on events (what the processes did), never on a clock
episode_length, task_of, generate = _common["episode_length"], _common["task_of"], _common["generate"]

# ---------------------------------------------------------------------------------------------------------------
# Writer processes
# ---------------------------------------------------------------------------------------------------------------
CHILD_BODY = textwrap.dedent('''
    import json, os, random, signal, sys, time
    import lerobot_zarr
    from lerobot_zarr.store.state import has_commit_point


    class Log:
        """Progress lines, each one write(2) to an O_APPEND file: a kill never leaves half a line."""

        def __init__(self, path):
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

        def __call__(self, *words):
            os.write(self.fd, (" ".join(str(w) for w in words) + "\\n").encode())

        def begin(self, **op):
            self("begin", json.dumps(op, separators=(",", ":")))


    def open_writer(root, durable, log):
        if not has_commit_point(root):
            log.begin(op="create")
            ds = lerobot_zarr.create(root, fps=FPS, features=FEATURES, durable=durable, pack_bytes=PACK_BYTES)
            log("done")
            return ds
        ds = lerobot_zarr.open_dataset(root, mode="r+") if durable else lerobot_zarr.WritableDataset(root, durable=False)
        assert ds.durable == durable
        return ds


    def add(ds, log, seed):
        n = ds.meta.total_episodes
        log.begin(op="add", seed=seed)
        e = ds.add_episode(generate(seed), task=task_of(seed))
        cap = ds.capacity_frames
        assert cap is not None or e == n, f"add_episode returned {e}, expected {n}"


    def random_ops(a, log):
        """Test 1: a random mix of appends, deletions, frame deletions and (idempotent) edits."""
        rng = random.Random(a["rng"])
        ds = open_writer(a["root"], a["durable"], log)
        log("open")
        seed = a["seed_base"]
        for _ in range(a["max_ops"]):
            lengths = ds.meta.episode_length.tolist()
            n = len(lengths)
            r = rng.random()
            big = n > 25
            if n == 0 or r < (0.2 if big else 0.5):
                add(ds, log, seed)
                seed += 1
            elif r < (0.65 if big else 0.65):
                k = rng.randint(1, min(n, 4 if big else 2))
                eps = sorted(rng.sample(range(n), k))
                log.begin(op="del", eps=eps)
                ds.delete_episodes(eps[0] - n if k == 1 and rng.random() < 0.3 else eps)
            elif r < 0.88:
                e = rng.randrange(n)
                length = lengths[e]
                if rng.random() < 0.5:
                    a0 = 0 if rng.random() < 0.05 else rng.randrange(length)
                    b0 = length if a0 == 0 and rng.random() < 0.3 else rng.randint(a0 + 1, min(length, a0 + 4))
                    frames, arg = list(range(a0, b0)), slice(a0, b0)
                else:
                    frames = sorted(rng.sample(range(length), rng.randint(1, min(3, length))))
                    arg = [f - length if rng.random() < 0.3 else f for f in frames]
                log.begin(op="delframes", e=e, frames=frames)
                ds.delete_frames(e, arg)
            else:
                e = rng.randrange(n)
                frames = None if rng.random() < 0.5 else (0, max(1, lengths[e] // 2))
                log.begin(op="edit", e=e)
                with ds.edit(e, frames) as ep:  # rewrites the same values: a kill mid-edit changes nothing
                    for name in (STATE, IMAGE):
                        ep[name][:] = np.array(ep[name])
            log("done")
        ds.close()


    def append_loop(a, log):
        """Tests 2-4: append (ring buffer) until the stop file appears; optionally also delete the oldest episode
        and delete a frame now and then."""
        ds = lerobot_zarr.WritableDataset(a["root"], durable=False)
        log("open")
        rng = random.Random(a["rng"])
        seed = a["seed_base"]
        deadline = time.monotonic() + a["max_seconds"]
        i = 0
        while not os.path.exists(a["stop"]) and time.monotonic() < deadline:
            n = ds.meta.total_episodes
            if a["deletes"] and i % 6 == 5 and n > 1:
                log.begin(op="del", eps=[0])
                ds.delete_episodes([0])
            elif a["deletes"] and i % 9 == 8 and n > 1:
                e = rng.randrange(n)
                f = rng.randrange(int(ds.meta.episode_length[e]))
                log.begin(op="delframes", e=e, frames=[f])
                ds.delete_frames(e, slice(f, f + 1))
            else:
                add(ds, log, seed)
                seed += 1
            log("done")
            i += 1
            time.sleep(a["pause"])
        ds.close()


    def kill_self():
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)


    def kill_at_commit_point(a, log):
        """Run one operation and SIGKILL this process just before (or just after) the rename that replaces the
        root zarr.json."""
        ds = lerobot_zarr.WritableDataset(a["root"], durable=False)
        log("open")
        root_doc = os.path.realpath(os.path.join(a["root"], "zarr.json"))

        def trap(original):
            def dying(src, dst, *args, **kwargs):
                if os.path.realpath(dst) == root_doc:
                    if a["when"] == "after":
                        original(src, dst, *args, **kwargs)
                    log("killing")
                    kill_self()
                return original(src, dst, *args, **kwargs)
            return dying

        os.replace, os.rename = trap(os.replace), trap(os.rename)
        op = a["op"]
        log.begin(**op)
        if op["op"] == "del":
            ds.delete_episodes(op["eps"])
        else:
            ds.delete_frames(op["e"], op["frames"])
        log("done")


    def kill_in_set_task(a, log):
        """set_task over several episodes, SIGKILLed at the first memory-map flush (the first episode's frames)."""
        ds = lerobot_zarr.WritableDataset(a["root"], durable=False)
        log("open")
        original = np.memmap.flush

        def dying(self):
            original(self)
            log("killing")
            kill_self()

        np.memmap.flush = dying
        log.begin(op="set_task", eps=a["eps"], task=a["task"])
        ds.set_task(a["eps"], a["task"])
        log("done")


    def fork_then(a, log):
        """Open the writer, fork a child, and let the child close its inherited copy, or exit normally (through
        interpreter shutdown, without touching the dataset), or sit idle until the stop file exists."""
        ds = lerobot_zarr.WritableDataset(a["root"], durable=False)
        log("open")
        pid = os.fork()
        if pid == 0:
            if a["child"] == "exit":
                sys.exit(0)
            try:
                if a["child"] == "close":
                    ds.close()
                else:
                    deadline = time.monotonic() + 30
                    while not os.path.exists(a["stop"]) and time.monotonic() < deadline:
                        time.sleep(0.01)
            finally:
                os._exit(0)
        if a["child"] != "idle":
            os.waitpid(pid, 0)
        log("forked", pid)
        add(ds, log, a["seed_base"])
        log("done")
        log("ready")
        deadline = time.monotonic() + 30
        while not os.path.exists(a["stop"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        ds.close()


    def try_lock(a, log):
        try:
            ds = lerobot_zarr.open_dataset(a["root"], mode="r+")
        except lerobot_zarr.StoreLockedError:
            log("LOCKED")
        else:
            log("ACQUIRED")
            ds.close()


    MODES = {"random": random_ops, "append": append_loop, "commit_kill": kill_at_commit_point,
             "set_task_kill": kill_in_set_task, "fork": fork_then, "try_lock": try_lock}


    def main(a):
        log = Log(a["log"])
        log("start")
        MODES[a["mode"]](a, log)
        log("exit")
''')

CHILD_SRC = COMMON + CHILD_BODY + "\nmain(json.loads(sys.argv[1]))\n"

ZYGOTE_SRC = COMMON + CHILD_BODY + textwrap.dedent('''
    def reply(obj):
        sys.stdout.write(json.dumps(obj) + "\\n")
        sys.stdout.flush()


    import warnings
    # pyarrow (imported by lerobot_zarr) runs jemalloc's background thread, which has its own fork handlers; the
    # writers forked here never use pyarrow
    warnings.filterwarnings("ignore", message="This process .* is multi-threaded", category=DeprecationWarning)
    reply({"ready": True})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "fork":
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    err = os.open(cmd["args"]["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    null = os.open(os.devnull, os.O_RDWR)
                    os.dup2(null, 0)
                    os.dup2(null, 1)
                    os.dup2(err, 2)
                    main(cmd["args"])
                    code = 0
                except BaseException:
                    import traceback
                    traceback.print_exc()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
            reply({"pid": pid})
        elif cmd["cmd"] == "wait":
            _, status = os.waitpid(cmd["pid"], 0)
            reply({"status": status})
''')


def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **{MIN_FREE_ENV: "0"})


@pytest.fixture(autouse=True)
def _no_free_space_margin(monkeypatch):
    """Writers in this process too: a shared machine's disk may be fuller than the default 256 MiB margin."""
    monkeypatch.setenv(MIN_FREE_ENV, "0")


def read_log(path: Path) -> list[str]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    return raw.decode().split("\n")[:-1]  # whole lines only


def parse_ops(lines: list[str]) -> tuple[list[dict], dict | None]:
    """The operations a writer reported done, and the one it began without reporting it done (if any)."""
    ops: list[list] = []
    for line in lines:
        if line.startswith("begin "):
            ops.append([json.loads(line[6:]), False])
        elif line == "done":
            ops[-1][1] = True
    done = [op for op, finished in ops if finished]
    inflight = ops[-1][0] if ops and not ops[-1][1] else None
    return done, inflight


def describe_log(lines: list[str], err: Path | None = None) -> str:
    done, inflight = parse_ops(lines)
    text = (f"child reported {len(done)} operations done (last: {done[-1] if done else None}), in flight: "
            f"{inflight}, last log lines: {lines[-3:]}")
    if err is not None and err.exists() and err.stat().st_size:
        text += f"\n--- child stderr ---\n{err.read_text()[-3000:]}"
    return text


class Child:
    """A writer (or lock probe) in a fresh interpreter; always SIGKILLed by pid in ``stop`` if still running."""

    def __init__(self, tmp: Path, name: str, **args):
        self.log, self.err = tmp / f"{name}.log", tmp / f"{name}.err"
        self.args = dict(args, log=str(self.log))
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", CHILD_SRC, json.dumps(self.args)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         env=child_env())

    def lines(self) -> list[str]:
        return read_log(self.log)

    def describe(self) -> str:
        return describe_log(self.lines(), self.err)

    def wait_for(self, predicate, what: str, timeout: float = 300.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            lines = self.lines()
            if predicate(lines):
                return lines
            if self.proc.poll() is not None:
                lines = self.lines()
                if predicate(lines):
                    return lines
                raise AssertionError(f"child exited ({self.proc.returncode}) before {what}: {self.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}: {self.describe()}")
            time.sleep(0.002)

    def finish(self, timeout: float = 300.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"child did not finish within {timeout} s: {self.describe()}") from None

    def kill(self) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(timeout=300)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def run_child(tmp: Path, name: str, timeout: float = 300.0, **args) -> Child:
    child = Child(tmp, name, **args)
    try:
        child.finish(timeout)
    finally:
        child.stop()
    return child


class Zygote:
    """A subprocess that imported lerobot_zarr once and forks writer processes on request (and reaps them)."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE_SRC], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=child_env())
        self._buf = b""
        self.children: set[int] = set()
        assert self._reply(timeout=300) == {"ready": True}

    def _send(self, obj: dict) -> None:
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def _reply(self, timeout: float = 60.0) -> dict:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"zygote did not answer within {timeout} s")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError(f"zygote exited (status {self.proc.poll()})")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def fork(self, args: dict) -> int:
        self._send({"cmd": "fork", "args": args})
        pid = self._reply()["pid"]
        self.children.add(pid)
        return pid

    def kill_and_wait(self, pid: int) -> int:
        """SIGKILL ``pid`` (our unreaped child: its pid cannot have been reused) and return its wait status."""
        os.kill(pid, signal.SIGKILL)
        self._send({"cmd": "wait", "pid": pid})
        status = self._reply()["status"]
        self.children.discard(pid)
        return status

    def close(self) -> None:
        try:
            for pid in list(self.children):
                self.kill_and_wait(pid)
        finally:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()


# ---------------------------------------------------------------------------------------------------------------
# Checking a store
# ---------------------------------------------------------------------------------------------------------------
Content = list[tuple[int, tuple[int, ...]]]  # per episode: (seed, rows of generate(seed) it holds)


def _eq(actual, expected, where: str, feature: str) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape or not np.array_equal(actual, expected):
        bad = "shape" if actual.shape != expected.shape else np.argwhere(actual != expected)[:3].tolist()
        raise AssertionError(f"{where}: feature {feature!r} differs from its regenerated content (at {bad}):\n"
                             f"actual   {actual.reshape(len(actual), -1)[:4].tolist() if actual.ndim else actual}\n"
                             f"expected {expected.reshape(len(expected), -1)[:4].tolist() if expected.ndim else expected}")


def check_dataset(ds: LeRobotZarrDataset, ctx: str, *, deep: bool = True) -> Content:
    """Every frame of every episode of ``ds`` against :func:`generate`, and LeRobot's invariants; returns the
    content (seed, rows) per episode. ``deep`` also reads each episode through ``ds.episode(e)``."""
    lengths = np.asarray(ds.meta.episode_length, dtype=np.int64)
    n_ep = len(lengths)
    assert ds.episodes.tolist() == list(range(n_ep)), f"{ctx}: episodes {ds.episodes.tolist()} (of {n_ep})"
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if n_ep else lengths
    _eq(ds.meta.episode_start, starts, ctx, "meta.episode_start (contiguous from 0)")
    total = int(lengths.sum())
    assert len(ds) == total, f"{ctx}: len(ds) = {len(ds)}, episode lengths sum to {total}"
    if not total:
        return []
    batch = ds.get_batch(np.arange(total))
    content: Content = []
    for e in range(n_ep):
        n, s = int(lengths[e]), slice(int(starts[e]), int(starts[e] + lengths[e]))
        seed = int(batch["obs.seed"][s][0])
        where = f"{ctx}: episode {e} of {n_ep} (seed {seed}, {n} frames)"
        _eq(batch["obs.seed"][s], np.full(n, seed), where, "obs.seed")
        _eq(batch["episode_index"][s], np.full(n, e), where, "episode_index")
        _eq(batch["index"][s], np.arange(starts[e], starts[e] + n), where, "index")
        _eq(batch["frame_index"][s], np.arange(n), where, "frame_index")
        _eq(batch["timestamp"][s], (np.arange(n) / FPS).astype(np.float32), where, "timestamp")
        rows = batch["obs.row"][s]
        assert (np.diff(rows) > 0).all() and rows[0] >= 0 and rows[-1] < episode_length(seed), \
            f"{where}: obs.row {rows.tolist()} is not an increasing subset of 0..{episode_length(seed) - 1}"
        ref = generate(seed)
        for name in (STATE, IMAGE):
            _eq(batch[name][s], ref[name][rows], where, name)
        tasks = set(batch["task"][s])
        assert tasks == {task_of(seed)}, f"{where}: tasks {tasks}, expected {task_of(seed)!r}"
        content.append((seed, tuple(rows.tolist())))
    if deep:
        for e in range(n_ep):
            ep = ds.episode(e)
            s = slice(int(starts[e]), int(starts[e] + lengths[e]))
            for name, values in ep.items():
                _eq(values, batch[name][s], f"{ctx}: ds.episode({e}) vs get_batch", name)
        i = int(np.random.default_rng(total).integers(total))
        item = ds[i]
        for name in ("obs.seed", "obs.row", "index", "episode_index", STATE, IMAGE):
            _eq(item[name], batch[name][i], f"{ctx}: ds[{i}] vs get_batch", name)
    return content


def check_stats(root: Path, ds: LeRobotZarrDataset, ctx: str) -> None:
    """The committed stats and info counters describe exactly the committed frames."""
    state = read_state(root)
    info = state.info
    total = len(ds)
    assert (info["total_episodes"], info["total_frames"]) == (ds.meta.total_episodes, total), \
        f"{ctx}: info says {info['total_episodes']} episodes / {info['total_frames']} frames"
    if not total:
        return
    batch = ds.get_batch(np.arange(total))
    for name in ("obs.seed", "obs.row", STATE, "index", "episode_index", "frame_index"):
        stats = state.stats[name]
        values = np.asarray(batch[name], dtype=np.float64).reshape(total, -1)
        for key, expected in (("min", values.min(axis=0)), ("max", values.max(axis=0))):
            _eq(np.asarray(stats[key], dtype=np.float64).reshape(-1), expected, f"{ctx}: stats[{name!r}][{key!r}]",
                name)
        assert int(np.asarray(stats["count"]).reshape(-1)[0]) == total, f"{ctx}: stats[{name!r}]['count']"


def open_and_check(root: Path, ctx: str, *, deep: bool = True) -> Content:
    return check_dataset(LeRobotZarrDataset(root), ctx, deep=deep)


def apply_op(model: Content | None, op: dict) -> Content | None:
    """The committed content after ``op`` (None: no store yet)."""
    if op["op"] == "create":
        return []
    assert model is not None, f"operation {op} on a store that was never created"
    model = list(model)
    if op["op"] == "add":
        model.append((op["seed"], tuple(range(episode_length(op["seed"])))))
    elif op["op"] == "del":
        model = [m for i, m in enumerate(model) if i not in set(op["eps"])]
    elif op["op"] == "delframes":
        seed, rows = model[op["e"]]
        rows = tuple(r for j, r in enumerate(rows) if j not in set(op["frames"]))
        if rows:
            model[op["e"]] = (seed, rows)
        else:
            del model[op["e"]]
    elif op["op"] != "edit":
        raise ValueError(op)
    return model


def summary(content: Content | None) -> str:
    if content is None:
        return "no store"
    return "[" + ", ".join(f"{s}" + (f"({len(r)}/{episode_length(s)})" if len(r) != episode_length(s) else "")
                           for s, r in content) + "]"


def check_no_debris(root: Path, ctx: str) -> None:
    """After a writer opened the store: pack files exist for committed packs only (none at or past the last pack
    id, full size), retired files only for packs the commit lists as retired, stats files for live episodes only,
    no commit debris at the root."""
    state = read_state(root)
    packs = state.packs
    committed = {k for k in range(len(packs)) if packs.rows[k] > 0}
    live = set(state.table.chunk.tolist())
    retired = {int(c) for c, _ in state.retired}
    assert live <= committed, f"{ctx}: episodes in packs {sorted(live - committed)} that are retired or unknown"
    assert not committed & retired, f"{ctx}: packs {sorted(committed & retired)} are both committed and retired"
    for name, spec in state.arrays.items():
        folder = root / name / "c"
        entries = sorted(os.listdir(folder)) if folder.is_dir() else []
        odd = [x for x in entries if not x.isdigit()]
        ids = {int(x) for x in entries if x.isdigit()}
        assert not odd and ids == committed, (
            f"{ctx}: {folder} holds pack ids {sorted(ids - committed)} that no commit lists ({len(packs)} packs) "
            f"and lacks {sorted(committed - ids)}; other entries {odd}")
        for k in sorted(committed):
            path = Path(chunk_path(root, name, k, spec.ndim))
            size = int(packs.rows[k]) * spec.frame_bytes
            assert path.is_file() and path.stat().st_size == size, f"{ctx}: {path} is not a {size}-byte file"
        rfolder = root / ".retired" / name
        kept = {int(x) for x in os.listdir(rfolder)} if rfolder.is_dir() else set()
        assert kept <= retired, f"{ctx}: {rfolder} holds packs {sorted(kept - retired)} the commit does not list"
    flags = {int(x) for x in os.listdir(root / "frame_live" / "c")} if (root / "frame_live" / "c").is_dir() else set()
    assert flags <= committed, f"{ctx}: frame_live holds packs {sorted(flags - committed)} no commit lists"
    stats = {p.name for p in (root / ".episode_stats").iterdir()} if (root / ".episode_stats").is_dir() else set()
    want = {f"{c}-{o}.json" for c, o in zip(state.table.chunk.tolist(), state.table.offset.tolist(), strict=True)}
    assert stats == want, f"{ctx}: .episode_stats holds {sorted(stats)}, live episodes {sorted(want)}"
    leftovers = sorted(p.name for p in root.glob(".zarr.json.tmp-*"))
    assert not leftovers, f"{ctx}: commit debris {leftovers} left at the root"


def wait_log(log: Path, err: Path, is_line, deadline: float, what: str, count: int = 1) -> None:
    """Wait until ``count`` lines of the log satisfy ``is_line`` (or the child crashed or finished: the caller
    reports that from its exit status)."""
    while True:
        lines = read_log(log)
        if sum(map(is_line, lines)) >= count or "exit" in lines or (err.exists() and err.stat().st_size):
            return
        assert time.monotonic() < deadline, f"{what}: child stalled: {describe_log(lines, err)}"
        time.sleep(0.0005)


# ---------------------------------------------------------------------------------------------------------------
# 1. SIGKILL at random moments
# ---------------------------------------------------------------------------------------------------------------
TARGET_KILLS = 56
MAX_CYCLES = 110


def test_sigkill_writer_at_random_moments(tmp_path):
    """50+ kill cycles on one store, each with a new writer (create, append, delete episodes or frames, edit);
    after each kill the store holds exactly the operations reported done, plus at most the one in flight."""
    root = tmp_path / "store"
    rng = random.Random(20250611)
    model: Content | None = None
    chunk_owner: dict[int, tuple[int, tuple[int, ...]]] = {}  # committed chunk id -> content it ever held
    kills, cycle, outcomes, strategies = 0, 0, Counter(), Counter()
    zygote = Zygote()
    try:
        while kills < TARGET_KILLS and cycle < MAX_CYCLES:
            log, err = tmp_path / f"cycle{cycle}.log", tmp_path / f"cycle{cycle}.err"
            durable = cycle % 7 == 3
            strategy = rng.choices(["during_open", "random", "after_done"], [0.25, 0.45, 0.3])[0]
            if cycle == 0:
                strategy = "during_open"  # the first writer creates the store: the kill may land in create()
            args = {"mode": "random", "root": str(root), "log": str(log), "stderr": str(err), "durable": durable,
                    "rng": cycle, "seed_base": 1000 * (cycle + 1), "max_ops": 60}
            # opened before the writer runs, maps nothing until checked after the kill (and a crash cleanup): it must
            # still read its commit, from .retired/ for chunks deleted meanwhile
            pending = LeRobotZarrDataset(root, max_open_maps=18) if model is not None else None
            pid = zygote.fork(args)
            deadline = time.monotonic() + 60  # generous: the machine may be loaded

            if strategy == "during_open":  # lands in the writer's open / crash cleanup or its first operation
                wait_log(log, err, "start".__eq__, deadline, f"cycle {cycle}")
                time.sleep(rng.uniform(0, 0.004))
            elif strategy == "random":
                wait_log(log, err, "open".__eq__, deadline, f"cycle {cycle}")
                time.sleep(rng.uniform(0, 0.15))
            else:  # right after the k-th reported commit: at the start of the next operation
                wait_log(log, err, "done".__eq__, deadline, f"cycle {cycle}", count=rng.randint(1, 5))
            status = zygote.kill_and_wait(pid)
            lines = read_log(log)
            ctx = f"kill cycle {cycle} ({strategy}, durable={durable})"
            if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
                kills += 1
                strategies[strategy] += 1
            else:
                assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and lines[-1:] == ["exit"], \
                    f"{ctx}: writer failed (status {status}): {describe_log(lines, err)}"
            done, inflight = parse_ops(lines)
            ctx += f": {describe_log(lines, err)}"
            before = model
            for op in done:
                model = apply_op(model, op)
            candidates = [model] + ([apply_op(model, inflight)] if inflight else [])
            if not has_commit_point(root):
                assert model is None, f"{ctx}: the store lost its commit point (expected {summary(model)})"
                outcomes["no store yet"] += 1
                cycle += 1
                continue
            state = read_state(root)
            ds = LeRobotZarrDataset(root)
            actual = check_dataset(ds, ctx)
            check_stats(root, ds, ctx)
            if actual == candidates[0]:
                outcomes["in-flight op not committed" if inflight else "no op in flight"] += 1
            elif len(candidates) > 1 and actual == candidates[1]:
                model = candidates[1]
                outcomes["in-flight op committed"] += 1
            else:
                raise AssertionError(
                    f"{ctx}:\nstore holds      {summary(actual)}\nexpected (done)  {summary(candidates[0])}\n"
                    + (f"or with in-flight {summary(candidates[1])}\n" if len(candidates) > 1 else "")
                    + f"before the cycle {summary(before)}")
            places = zip(state.table.chunk.tolist(), state.table.offset.tolist(), strict=True)
            for place, episode in zip(places, actual, strict=True):
                assert chunk_owner.setdefault(place, episode) == episode, (
                    f"{ctx}: rows at (pack, offset) {place} reused: held {summary([chunk_owner[place]])}, now "
                    f"{summary([episode])}")
            if cycle % 3 == 0:  # a new writer in this process, at once: the dead writer's lock is gone
                with lerobot_zarr.open_dataset(root, mode="r+") as writer:
                    assert check_dataset(writer, ctx + " (reopened writer)", deep=False) == actual
                check_no_debris(root, ctx + " (after a writer reopened)")
            if pending is not None:
                assert check_dataset(pending, ctx + " (reader of the commit before the cycle)") == before
            cycle += 1
    finally:
        zygote.close()
    report = f"{kills} kills in {cycle} cycles, outcomes {dict(outcomes)}, kills by strategy {dict(strategies)}"
    print(report)
    assert kills >= 50, report
    assert outcomes["in-flight op not committed"] >= 5, report

    with lerobot_zarr.open_dataset(root, mode="r+") as writer:  # cleans up after the last kill
        assert check_dataset(writer, "final writer") == model
    check_no_debris(root, f"after {kills} kills and a writer reopened")
    # temporary files of killed commits below the root are left behind (see test_crash_cleanup_removes_temporary_files)
    print("temporary files left:", sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp-*")))
    assert check_dataset(LeRobotZarrDataset(root), "final reader") == model


# ---------------------------------------------------------------------------------------------------------------
# 2. A reader polling while a writer appends and deletes
# ---------------------------------------------------------------------------------------------------------------
CAPACITY = 300


def ring_invariants(content: Content, ctx: str, capacity: int) -> None:
    seeds = [s for s, _ in content]
    assert seeds == sorted(set(seeds)), f"{ctx}: episodes not in recording order: {seeds}"
    total = sum(len(r) for _, r in content)
    assert total <= capacity, f"{ctx}: {total} frames in a ring buffer of {capacity}"


def test_reader_polls_while_writer_appends_and_deletes(tmp_path):
    root = tmp_path / "store"
    with lerobot_zarr.create(root, fps=FPS, features=FEATURES, capacity_frames=CAPACITY, durable=False,
                             pack_bytes=PACK_BYTES) as w:
        for seed in range(5):
            w.add_episode(generate(seed), task=task_of(seed))
    long_lived = LeRobotZarrDataset(root)
    stop = tmp_path / "stop"
    writer = Child(tmp_path, "writer", mode="append", root=str(root), stop=str(stop), rng=1, seed_base=5,
                   max_seconds=HANG_S, pause=0.002, deletes=True)
    fresh_seen: list[Content] = []  # what each fresh reader saw
    refreshes = polls = 0

    def overlap() -> tuple[int, int]:
        counts = [len(c) for c in fresh_seen]
        return len(set(map(tuple, fresh_seen))), sum(a != b for a, b in itertools.pairwise(counts))

    try:
        writer.wait_for(lambda lines: "open" in lines, "the writer to open")
        t0 = time.monotonic()
        while True:
            elapsed = time.monotonic() - t0
            states, changes = overlap()
            done_ops = {op["op"] for op in parse_ops(writer.lines())[0]}
            # until the reader saw the writer's work and the writer did every kind of operation: events, not a
            # clock, end the loop (a loaded machine takes longer; the bound only stops a hang)
            if states >= 10 and changes >= 5 and refreshes >= 5 and done_ops == {"add", "del", "delframes"}:
                break
            assert elapsed < HANG_S, (f"the reader saw {states} states, {changes} count changes, {refreshes} "
                                      f"refreshes in {elapsed:.0f} s: {writer.describe()}")
            assert writer.proc.poll() is None, f"writer died: {writer.describe()}"
            ctx = f"poll {polls} at {elapsed:.2f} s (writer: {describe_log(writer.lines())})"
            ds = LeRobotZarrDataset(root)
            content = check_dataset(ds, "fresh reader, " + ctx)
            ring_invariants(content, "fresh reader, " + ctx, CAPACITY)
            fresh_seen.append(content)
            refreshes += long_lived.refresh()
            content = check_dataset(long_lived, "long-lived reader after refresh(), " + ctx, deep=polls % 2 == 0)
            ring_invariants(content, "long-lived reader, " + ctx, CAPACITY)
            polls += 1
        stop.touch()
        assert writer.finish() == 0, f"writer failed: {writer.describe()}"
    finally:
        writer.stop()
    states, changes = overlap()
    report = (f"{polls} polls, {states} distinct states seen, episode count changed {changes} times, "
              f"{refreshes} refreshes picked up changes, counts seen {sorted({len(c) for c in fresh_seen})}")
    print(report)
    assert states >= 10 and changes >= 5 and refreshes >= 5, f"reader barely overlapped the writer: {report}"
    done, _ = parse_ops(writer.lines())
    assert {op["op"] for op in done} == {"add", "del", "delframes"}, f"writer did not exercise every op: {report}"
    content = open_and_check(root, "after the writer stopped")
    ring_invariants(content, "after the writer stopped", CAPACITY)
    long_lived.refresh()
    assert check_dataset(long_lived, "long-lived reader, final refresh") == content


# ---------------------------------------------------------------------------------------------------------------
# 3. Ring buffer eviction under a long-lived reader of an older commit
# ---------------------------------------------------------------------------------------------------------------
def test_ring_buffer_evicts_under_a_long_lived_reader(tmp_path):
    capacity = 120
    root = tmp_path / "store"
    with lerobot_zarr.create(root, fps=FPS, features=FEATURES, capacity_frames=capacity, durable=False,
                             pack_bytes=PACK_BYTES) as w:
        for seed in range(14):
            w.add_episode(generate(seed), task=task_of(seed))
    state0 = read_state(root)
    # two episodes mapped at a time (9 stored features): sampling keeps unmapping and mapping chunk files again
    reader = LeRobotZarrDataset(root, max_open_maps=18)
    content0 = check_dataset(reader, "reader before eviction")
    first = content0[0][0]
    assert first > 0, "the initial episodes should already have overflowed the ring buffer"
    full = reader.get_batch(np.arange(len(reader)))
    live0 = set(state0.table.chunk.tolist())
    stop = tmp_path / "stop"
    writer = Child(tmp_path, "writer", mode="append", root=str(root), stop=str(stop), rng=2, seed_base=14,
                   max_seconds=HANG_S, pause=0.002, deletes=False)
    rng = np.random.default_rng(0)
    batches = after_eviction = 0
    try:
        writer.wait_for(lambda lines: "open" in lines, "the writer to open")
        t0 = time.monotonic()
        while after_eviction < 40:
            elapsed = time.monotonic() - t0
            added = sum(op["op"] == "add" for op in parse_ops(writer.lines())[0])
            # every episode of the reader's commit is evicted once the writer added a ring's worth more (14
            # episodes of ~10 frames fill 120): after 60 adds it must be; the clock only stops a hang
            assert added < 60 or after_eviction, (f"the writer added {added} episodes without evicting every episode "
                                                  f"of the reader's commit ({batches} batches): {writer.describe()}")
            assert elapsed < HANG_S, f"no eviction after {elapsed:.0f} s ({batches} batches): {writer.describe()}"
            assert writer.proc.poll() is None, f"writer died: {writer.describe()}"
            ctx = f"batch {batches} at {elapsed:.2f} s (writer: {describe_log(writer.lines())})"
            idx = rng.integers(0, len(reader), 48)
            try:
                batch = reader.get_batch(idx)
                e = int(rng.integers(reader.meta.total_episodes))
                episode = reader.episode(e)
            except Exception as exc:
                raise AssertionError(f"old-commit reader failed, {ctx}: {exc!r}") from exc
            for name, values in batch.items():
                expected = [full[name][i] for i in idx] if name == "task" else full[name][idx]
                _eq(values, expected, f"old-commit reader, {ctx}", name)
            s = reader.episode_frames(e)
            for name, values in episode.items():
                _eq(values, full[name][s.start:s.stop], f"old-commit reader, episode({e}), {ctx}", name)
            batches += 1
            live = set(read_state(root).table.chunk.tolist())
            if not live & live0:
                after_eviction += 1
            fresh = open_and_check(root, "fresh reader, " + ctx, deep=False)
            seeds = [s for s, _ in fresh]
            assert seeds == list(range(seeds[0], seeds[0] + len(seeds))), f"{ctx}: ring holds seeds {seeds}"
            total = sum(len(r) for _, r in fresh)
            assert total <= capacity < total + episode_length(seeds[0] - 1), \
                f"{ctx}: ring of {capacity} frames holds {total} frames; it dropped more than needed"
        # every chunk of the reader's commit now lives under .retired/ only, and the reader still reads them
        for name, spec in state0.arrays.items():
            for chunk in sorted(live0):
                assert not Path(chunk_path(root, name, chunk, spec.ndim)).exists(), (name, chunk)
                assert Path(retired_path(root, name, chunk)).is_file(), f"{name}: retired chunk {chunk} missing"
        assert check_dataset(reader, "old-commit reader after eviction") == content0
        stop.touch()
        assert writer.finish() == 0, f"writer failed: {writer.describe()}"
    finally:
        writer.stop()
    assert reader.refresh()
    content = check_dataset(reader, "reader after refresh()")
    assert content[0][0] > content0[-1][0], "refresh() should show only episodes recorded after the reader's commit"


# ---------------------------------------------------------------------------------------------------------------
# 4. The writer lock
# ---------------------------------------------------------------------------------------------------------------
def test_killed_writer_releases_lock_and_second_live_writer_is_refused(tmp_path):
    root = tmp_path / "store"
    with lerobot_zarr.create(root, fps=FPS, features=FEATURES, durable=False, pack_bytes=PACK_BYTES) as w:
        for seed in range(3):
            w.add_episode(generate(seed), task=task_of(seed))
    stop = tmp_path / "stop"
    writer = Child(tmp_path, "writer", mode="append", root=str(root), stop=str(stop), rng=3, seed_base=3,
                   max_seconds=HANG_S, pause=0.003, deletes=True)
    try:
        writer.wait_for(lambda lines: lines.count("done") >= 3, "three commits")
        with pytest.raises(StoreLockedError, match=str(root)):
            lerobot_zarr.open_dataset(root, mode="r+")
        with pytest.raises(StoreLockedError):
            lerobot_zarr.WritableDataset(root, durable=False)
        open_and_check(root, "reader while the writer holds the lock", deep=False)  # readers are never blocked
        writer.wait_for(lambda lines: lines[-1:] != ["done"], "the writer to be inside an operation")
        assert writer.kill() == -signal.SIGKILL
    finally:
        writer.stop()
    lines = writer.lines()
    ctx = f"after killing the writer ({describe_log(lines)})"
    w = lerobot_zarr.open_dataset(root, mode="r+")  # non-blocking lock: raises StoreLockedError if still held
    try:
        before = check_dataset(w, ctx)
        with pytest.raises(StoreLockedError):
            lerobot_zarr.WritableDataset(root, durable=False)  # a second writer in the same process
        probe = run_child(tmp_path, "probe1", mode="try_lock", root=str(root))
        assert probe.lines()[-2:] == ["LOCKED", "exit"], f"second writer process: {probe.describe()}"
        seed = 10**6
        assert w.add_episode(generate(seed), task=task_of(seed)) == len(before)
    finally:
        w.close()
    probe = run_child(tmp_path, "probe2", mode="try_lock", root=str(root))
    assert probe.lines()[-2:] == ["ACQUIRED", "exit"], f"writer after close(): {probe.describe()}"
    assert open_and_check(root, ctx) == before + [(seed, tuple(range(episode_length(seed))))]


def _fork_setup(tmp_path: Path, child: str) -> tuple[Path, Path, Child]:
    root = tmp_path / "store"
    with lerobot_zarr.create(root, fps=FPS, features=FEATURES, durable=False, pack_bytes=PACK_BYTES) as w:
        w.add_episode(generate(0), task=task_of(0))
    stop = tmp_path / "stop"
    writer = Child(tmp_path, "writer", mode="fork", child=child, root=str(root), stop=str(stop), seed_base=1)
    return root, stop, writer


@pytest.mark.parametrize("child", ["close", "exit"])
def test_forked_child_keeps_the_writers_lock(tmp_path, child):
    """A forked child shares the writer's lock file description: its close() of the inherited WritableDataset, or
    its normal exit (the finalizer runs at interpreter exit), must not release the lock of the writer, which is
    alive and writing: a second writer stays out."""
    root, stop, writer = _fork_setup(tmp_path, child)
    try:
        writer.wait_for(lambda lines: "ready" in lines, "the writer to fork")
        try:
            intruder = lerobot_zarr.open_dataset(root, mode="r+")
        except StoreLockedError:
            intruder = None
        got_in = intruder is not None
        if got_in:
            intruder.close()
        how = "called close() on its inherited copy" if child == "close" else "exited through sys.exit(0)"
        assert not got_in, (f"a second writer opened the store while its writer (alive, holding the lock) was "
                            f"writing: the writer's forked child had {how}")
    finally:
        stop.touch()
        writer.stop()


def test_lock_does_not_outlive_a_killed_writer_with_a_forked_child(tmp_path):
    """Forked children (fork-based DataLoader workers, multiprocessing fork) do not keep the lock: once the writer is
    SIGKILLed the store can be reopened for writing although such a child still lives."""
    root, stop, writer = _fork_setup(tmp_path, "idle")
    try:
        lines = writer.wait_for(lambda lines: "ready" in lines, "the writer to fork")
        grandchild = int(next(line.split()[1] for line in lines if line.startswith("forked ")))
        assert writer.kill() == -signal.SIGKILL
        try:
            w = lerobot_zarr.open_dataset(root, mode="r+")
        except StoreLockedError as exc:
            raise AssertionError(f"the writer was SIGKILLed but its lock is still held (by its idle forked child, "
                                 f"pid {grandchild}): {exc}") from None
        w.close()
    finally:
        stop.touch()  # the idle child exits on its own once the stop file exists
        writer.stop()


# ---------------------------------------------------------------------------------------------------------------
# Deterministic kill points
# ---------------------------------------------------------------------------------------------------------------
def test_zarr_copy_of_episode_table_matches_commit_after_kill_at_commit_point(tmp_path):
    """A commit writes ``episode_*/c/0`` (the zarr copy of the episode table) and each ``<feature>/zarr.json``
    before the root ``zarr.json``: a writer killed between the two leaves zarr readers the copy of an uncommitted
    change (here delete_frames: same episode count, wrong lengths) until the next writer's crash cleanup rewrites
    them from the commit."""
    root = tmp_path / "store"
    with lerobot_zarr.create(root, fps=FPS, features=FEATURES, durable=False, pack_bytes=PACK_BYTES) as w:
        for seed in range(3):
            w.add_episode(generate(seed), task=task_of(seed))
    child = run_child(tmp_path, "writer", mode="commit_kill", root=str(root), when="before",
                      op={"op": "delframes", "e": 0, "frames": [0, 1]})
    assert child.proc.returncode == -signal.SIGKILL and "killing" in child.lines(), child.describe()
    content = open_and_check(root, "after the kill at the commit point")
    assert content == [(s, tuple(range(episode_length(s)))) for s in range(3)], "the delete_frames was not committed"
    with lerobot_zarr.open_dataset(root, mode="r+"):  # crash cleanup
        pass
    state = read_state(root)
    lengths = state.table.length.tolist()
    copy = np.fromfile(root / "episode_length" / "c" / "0", dtype="<i8").tolist()
    import zarr  # only here: zarr starts an event-loop thread in this process

    seen_by_zarr = zarr.open_group(root, mode="r")["episode_length"][:].tolist()
    feature_doc = json.loads((root / STATE / "zarr.json").read_text())["shape"][0]
    rows = int(np.maximum(state.packs.rows, 1).sum())
    assert (copy, seen_by_zarr, feature_doc) == (lengths, lengths, rows), (
        f"committed episode lengths {lengths} ({rows} rows of packs), but episode_length/c/0 holds "
        f"{copy}, zarr reads episode_length = {seen_by_zarr}, {STATE}/zarr.json says "
        f"{feature_doc} frames: the zarr copy describes the killed, uncommitted delete_frames")


@pytest.mark.parametrize("op", [{"op": "del", "eps": [0, 2]}, {"op": "delframes", "e": 1, "frames": [0, 3]}])
def test_kill_between_commit_and_retiring_keeps_the_old_commit_readable(tmp_path, op):
    """Killed right after the commit, before moving the deleted episodes' chunks to .retired/: the commit stands,
    the next writer's crash cleanup retires the leftovers (no debris), and a reader of the previous commit, mapping
    its chunks only now, still reads its episodes."""
    root = tmp_path / "store"
    with lerobot_zarr.create(root, fps=FPS, features=FEATURES, durable=False, pack_bytes=PACK_BYTES) as w:
        for seed in range(4):
            w.add_episode(generate(seed), task=task_of(seed))
    before = [(s, tuple(range(episode_length(s)))) for s in range(4)]
    old_reader = LeRobotZarrDataset(root, max_open_maps=9)  # maps one episode at a time, nothing yet
    child = run_child(tmp_path, "writer", mode="commit_kill", root=str(root), when="after", op=op)
    assert child.proc.returncode == -signal.SIGKILL and "killing" in child.lines(), child.describe()
    after = apply_op(before, op)
    assert open_and_check(root, "after the kill past the commit point") == after
    with lerobot_zarr.open_dataset(root, mode="r+") as w:  # crash cleanup
        assert check_dataset(w, "writer reopened after the kill") == after
    check_no_debris(root, "after the crash cleanup")
    assert check_dataset(old_reader, "reader of the commit before the kill") == before


def test_crash_cleanup_removes_temporary_files(tmp_path):
    """A commit replaces the root ``zarr.json`` through a temporary file ``.<name>.tmp-<pid>`` and a rename (zarr's
    copies, ``<array>/zarr.json`` and ``episode_*/c/0``, are written in place); the temporary file of a writer
    killed in between is removed by the next writer's crash cleanup (no leak, however many crashes)."""
    root = tmp_path / "store"
    with lerobot_zarr.create(root, fps=FPS, features=FEATURES, durable=False, pack_bytes=PACK_BYTES) as w:
        for seed in range(2):
            w.add_episode(generate(seed), task=task_of(seed))
    child = run_child(tmp_path, "writer", mode="commit_kill", root=str(root), when="before",
                      op={"op": "del", "eps": [0]})
    assert child.proc.returncode == -signal.SIGKILL and "killing" in child.lines(), child.describe()
    assert open_and_check(root, "after the kill") == [(s, tuple(range(episode_length(s)))) for s in range(2)]
    with lerobot_zarr.open_dataset(root, mode="r+"):  # crash cleanup
        pass
    check_no_debris(root, "after the crash cleanup")
    leftovers = sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp-*"))
    assert not leftovers, f"temporary files of the killed commit survive the crash cleanup: {leftovers}"


def test_crash_cleanup_removes_temporary_pack_files_at_every_depth(tmp_path):
    """A process killed while it makes a pack file (created under ``.<name>.tmp-<pid>-<thread>``, then renamed)
    leaves that file beside the pack, as deep as the array has dimensions (a camera's pack is ``c/<k>/0/0/0``): the
    next writer removes it at every depth, and keeps every pack and value."""
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    src = write_sample_dataset(tmp_path / "src", n_episodes=3, image_keys=("observation.images.top",),
                               image_shape=(8, 8, 3), extra_nd=True)
    root = tmp_path / "store"
    lerobot_zarr.open_dataset(src, root=root, progress=False)
    state = read_state(root)
    want = LeRobotZarrDataset(root).get_batch(np.arange(state.table.length.sum()))
    debris = []
    for name, spec in state.arrays.items():
        pack = Path(chunk_path(root, name, 0, spec.ndim))
        debris.append(pack.with_name(f".{pack.name}.tmp-99999999-1"))
        debris[-1].write_bytes(b"half made")
    assert {len(p.relative_to(root).parts) for p in debris} >= {3, 4, 6}  # 1-D, 2-D and camera packs
    with lerobot_zarr.open_dataset(root, mode="r+"):  # crash cleanup
        pass
    assert not [p for p in debris if p.exists()], "temporary pack files of a killed process survive the cleanup"
    got = LeRobotZarrDataset(root).get_batch(np.arange(state.table.length.sum()))
    for key, value in want.items():
        assert np.array_equal(np.asarray(got[key]), np.asarray(value)), key


def test_crash_cleanup_removes_the_folders_of_a_retired_pack(tmp_path):
    """A retired pack whose file is already under ``.retired/`` but whose folders stayed (``c/<k>/0/0`` of a camera,
    with the temporary file of a creation killed there) is gone after the next writer's crash cleanup: no pack id
    that no commit lists stays in ``c/`` (seen once in the random kill test below)."""
    root = tmp_path / "store"
    with lerobot_zarr.create(root, fps=FPS, features=FEATURES, durable=False, pack_bytes=PACK_BYTES) as w:
        for seed in range(8):
            w.add_episode(generate(seed), task=task_of(seed))
        dead = [e for e in range(8) if int(read_state(root).table.chunk[e]) == 0]
        w.delete_episodes(dead)
    state = read_state(root)
    assert state.packs.rows[0] == 0 and 0 in {pack for pack, _ in state.retired}, "pack 0 should be retired"
    before = open_and_check(root, "before the crash")
    camera = next(name for name, spec in state.arrays.items() if spec.ndim == 4)
    folder = Path(chunk_path(root, camera, 0, 4)).parent
    folder.mkdir(parents=True)
    (folder / ".0.tmp-99999999-1").write_bytes(b"half made")
    with lerobot_zarr.open_dataset(root, mode="r+"):  # crash cleanup
        pass
    check_no_debris(root, "after the crash cleanup")
    assert open_and_check(root, "after the crash cleanup") == before


def test_set_task_killed_midway_is_finished_by_the_next_writer(tmp_path):
    """set_task commits the new tasks together with the frame rewrite still to do, then rewrites the frames in
    place: killed after the first episode, the committed table already says the new task and lists the pending
    rewrite; the next writer finishes it when it opens, so frames and table agree again."""
    root = tmp_path / "store"
    with lerobot_zarr.create(root, fps=FPS, features=FEATURES, durable=False, pack_bytes=PACK_BYTES) as w:
        for seed in range(3):
            w.add_episode(generate(seed), task=task_of(seed))
    child = run_child(tmp_path, "writer", mode="set_task_kill", root=str(root), eps=[0, 1, 2], task="relabelled")
    assert child.proc.returncode == -signal.SIGKILL and "killing" in child.lines(), child.describe()
    state = read_state(root)
    committed = [state.tasks[t] for t in state.table.task_index.tolist()]
    assert committed == ["relabelled"] * 3, f"the kill came after the first commit, which says {committed}"
    assert state.pending_tasks, "the commit does not record the frame rewrite still to do"
    lerobot_zarr.open_dataset(root, mode="r+").close()  # the next writer finishes the rewrite
    ds = LeRobotZarrDataset(root)
    state = read_state(root)
    tasks_of_frames = [sorted(set(ds.get_batch(np.arange(r.start, r.stop))["task"]))
                       for r in (ds.episode_frames(e) for e in range(3))]
    committed = [state.tasks[t] for t in state.table.task_index.tolist()]
    assert tasks_of_frames == [["relabelled"]] * 3 and committed == ["relabelled"] * 3, (
        f"after the next writer opened: frames' tasks per episode {tasks_of_frames}, committed {committed}")
    assert not state.pending_tasks
