"""The background encoders of a recording through the drop-in (:class:`Encoders`): one process for every video
camera (:class:`~lerobot_zarr.writing.segments.BackgroundEncoder`, a thread per camera in it), told what to encode
by a thread of the recorder, waited for with bounds, and reaped once told to exit."""

from __future__ import annotations

import contextlib
import logging
import queue
import signal
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from ..writing.segments import FLUSH_TIMEOUT, BackgroundEncoder, Gate, finish

logger = logging.getLogger(__name__)
#: seconds finalize waits for background encoders making no progress (no segment made or growing) before it stops
#: them and encodes what they lack itself
FINISH_TIMEOUT = 60.0
#: seconds a command to the background encoders may take to be written to their pipes (a stopped encoder with a full
#: pipe: logged, and nothing is written to the pipes but by the thread that delivers the commands)
DELIVERY_TIMEOUT = 60.0


class Encoders:
    """The background encoders of a recording: one process for the video cameras (``cameras``) of the store at
    ``root``, each encoded by a thread of it (as LeRobot's encoder threads: one interpreter's start and one opening
    of the store per commit, not one per camera), started at the recording's first frame (:meth:`start`), told
    what to encode by a thread of its own
    (:meth:`stream`, :meth:`end`, :meth:`drop`, :meth:`saved`, :meth:`notify`: in order, not waited for; a
    ``save_episode`` then waits for the videos with :meth:`flush`, bounded)."""

    def __init__(self, root: Path, cameras: list[str], threads: int | None, gate: Gate):
        self.root, self.cameras, self.threads, self.gate = Path(root), cameras, threads, gate
        self.processes: list[BackgroundEncoder] = []
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._messenger: threading.Thread | None = None

    def start(self) -> None:
        """Start the process if not yet (at the recording's first frame: its start, ~0.4 s of CPU, is over by the
        first ``save_episode``); it first encodes the saved episodes that lack segments."""
        if not self.processes:
            self.processes = [BackgroundEncoder(self.root, self.threads, cameras=self.cameras, prune=True,
                                                gate=self.gate.path)]

    def _post(self, send: Callable[[BackgroundEncoder], None], camera: str | None = None) -> None:
        """Have the messenger thread call ``send`` on the process of ``camera`` (None: each process). A thread:
        a write to a process's pipe wakes it, and on a loaded machine the writing thread may then wait long for a
        CPU again (measured: up to 0.96 s at load 13-18, in ``save_episode``)."""
        if self._messenger is None:
            self._messenger = threading.Thread(target=self._deliver, name="lerobot_zarr-notify", daemon=True)
            self._messenger.start()
        self._outbox.put((send, camera))

    def _deliver(self) -> None:
        while True:
            send, camera = self._outbox.get()
            if send is None:  # :meth:`release`
                for process in self.processes:
                    process.close()
                reap(self.processes, None)
                return
            if isinstance(send, threading.Event):  # delivered so far (:meth:`_delivered`)
                send.set()
                continue
            for process in self.processes:
                if camera is None or camera in process.cameras:
                    send(process)

    def _delivered(self, timeout: float | None = None) -> bool:
        """Wait (at most ``timeout`` s, :data:`DELIVERY_TIMEOUT` by default: a process stopped with a full pipe)
        until what was posted is delivered;
        False, logged, if it was not (the messenger thread may still write to the pipes: write none directly)."""
        if self._messenger is None:
            return True
        done, timeout = threading.Event(), DELIVERY_TIMEOUT if timeout is None else timeout
        self._outbox.put((done, None))
        if done.wait(timeout):
            return True
        logger.warning("%s: the background encoders' commands were not delivered within %g s (an encoder does not "
                       "read them: stopped?)", self.root, timeout)
        return False

    def stream(self, spills: Mapping[str, Path]) -> None:
        """A new episode is recorded, each camera's frames appended to its spill file of ``spills``: encode them as
        they come."""
        self.start()
        for key, path in spills.items():
            self._post(lambda p, key=key, path=path: p.stream(key, path), key)

    def end(self, frames: int) -> None:
        """The episode streamed is being saved with ``frames`` frames: complete its files now (during the commit, or
        once it is over)."""
        for key in self.cameras:
            self._post(lambda p, key=key: p.end(key, frames), key)

    def drop(self) -> None:
        """The episode in progress was cleared: drop what was encoded of it."""
        for key in self.cameras:
            self._post(lambda p, key=key: p.drop(key), key)

    def saved(self, episode: int, *, reply: bool = False) -> None:
        """The episode streamed was committed as ``episode``: what was encoded of it becomes its segments (once
        checked against the committed frames), the rest encoded at once (``reply``: each process then replies as
        to a flush, :meth:`flush` with ``asked``)."""
        self._post(lambda p: p.saved(episode, reply=reply))

    def notify(self) -> None:
        """Episodes were saved: encode them (each process at once, or after the episode it is encoding)."""
        if not self.processes:
            self.start()
        else:
            self._post(BackgroundEncoder.notify)

    def flush(self, timeout: float | None = FLUSH_TIMEOUT, *, asked: bool = False) -> bool:
        """Wait until every saved episode has its segments (:meth:`BackgroundEncoder.flush`; ``asked``: the reply
        was asked for with :meth:`saved`); False, logged, if an encoder ended without making them all (the push
        encodes the others)."""
        from ..errors import EncoderTimeoutError

        if not self.processes:
            self.notify()
        if not self._delivered():
            raise EncoderTimeoutError(f"{self.root}: the background encoders were not told of the episode (one "
                                      f"of them does not read its commands)", path=self.root)
        ended, stalled = [], []
        for process in self.processes:  # each waited for, even after one stalled: its reply is read, or owed
            try:
                if not process.flush(timeout, asked=asked):
                    ended.append(process)
            except EncoderTimeoutError as exc:
                stalled.append(exc)
        for process in ended:
            logger.warning("%s: the background encoder of %s ended (exit status %s) before encoding every saved "
                           "episode; the push encodes the others", self.root, process.cameras,
                           process.process.returncode)
        if stalled:
            raise stalled[0]
        return not ended

    def release(self) -> None:
        """The recorder was dropped without ``finalize``: after what was posted, each process is told to finish
        the saved episodes and exit (not waited for), and the messenger thread ends."""
        if self._messenger is None:
            for process in self.processes:
                process.close()
        else:
            self._outbox.put((None, None))
            self._messenger = None  # (a later post starts another)

    def process(self, camera: str) -> BackgroundEncoder | None:
        """The process encoding ``camera`` (None: not started)."""
        return next((p for p in self.processes if camera in p.cameras), None)

    def exit(self) -> None:
        """No more episodes and every saved one has its segments: each process exits at once, reaped by a thread
        of its own (:func:`reap`: not waited for)."""
        if not self._delivered():  # after what the messenger thread has still to write (reaped at release)
            self._post(lambda p: p.exit())
            return
        processes, self.processes = self.processes, []
        for process in processes:
            process.exit()
        reap(processes, FINISH_TIMEOUT)

    def close(self) -> None:
        """No more episodes: each process finishes the saved ones, then exits (not waited for: :meth:`finish`)."""
        if self._delivered():
            for process in self.processes:
                process.close()
        else:  # after what the messenger thread has still to write
            self._post(lambda p: p.close())

    def finish(self, timeout: float | None = None) -> None:
        """No more episodes: wait (bounded: ``timeout`` seconds without progress) until the encoders have made the
        segments of every saved episode and exited; one stalled is stopped, one that failed is logged: the export
        encodes what they did not make."""
        if not self.processes:
            return
        if not self._delivered():  # one does not read its commands: stopped (its pipe broken, the write under way
            for process in self.processes:  # ends), rather than waited for behind it
                with contextlib.suppress(ProcessLookupError):
                    process.process.send_signal(signal.SIGTERM)
                    process.process.send_signal(signal.SIGCONT)
        processes, self.processes = self.processes, []  # (a second call has nothing to wait for)
        if not finish(processes, FINISH_TIMEOUT if timeout is None else timeout):
            logger.warning("%s: the background encoders ended (exit status %s) before encoding every saved episode; "
                           "finalize encodes the others", self.root, [p.process.returncode for p in processes])


def reap(processes: list[BackgroundEncoder], timeout: float | None) -> None:
    """A daemon thread waits for ``processes`` to exit (told to: finish or exit) and closes their pipes, so that no
    zombie nor pipe is left while the recording's objects live; one not exited within ``timeout`` seconds (None:
    no bound) is stopped (:meth:`~lerobot_zarr.writing.segments.BackgroundEncoder.cancel`: told to exit, it has
    nothing left to make)."""
    import subprocess

    def wait_all() -> None:
        for process in processes:
            try:
                process.process.wait(timeout)
            except subprocess.TimeoutExpired:
                logger.warning("%s: the background encoder (pid %s) did not exit within %g s of being told to; "
                               "stopped", process.root, process.pid, timeout)
                process.cancel()
            process.wait()

    if processes:
        threading.Thread(target=wait_all, name="lerobot_zarr-reap", daemon=True).start()
