"""Azure Blob Storage for tests: Azurite (Microsoft's emulator, from the npm registry: ``npm install azurite``), run
on 127.0.0.1 with its well-known development account, so that ``az://`` URLs are tested against a real Azure
implementation, not a mock.

Azurite is found as ``$LEROBOT_ZARR_AZURITE`` (its ``azurite-blob`` command), else ``azurite-blob`` on ``PATH``,
else ``node_modules/.bin/azurite-blob`` of the repository; :func:`find_azurite` returns None when there is none
(tests skip). Containers are made with a request signed by the account's key (Shared Key), as the Azure SDKs do.

Usage::

    with AzuriteServer() as az:
        az.create_container("data")
        os.environ.update(az.client_env())   # AZURE_STORAGE_ACCOUNT_NAME / _KEY, the emulator's URL
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

__all__ = ["AzuriteServer", "find_azurite", "ACCOUNT", "ACCOUNT_KEY", "AZURITE_ENV"]

AZURITE_ENV = "LEROBOT_ZARR_AZURITE"
ACCOUNT = "devstoreaccount1"  # Azurite's development account and key (public, documented by Microsoft)
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_VERSION = "2021-08-06"


def find_azurite() -> str | None:
    """The ``azurite-blob`` command, or None when Azurite is not installed (or node is missing)."""
    found = os.environ.get(AZURITE_ENV) or shutil.which("azurite-blob")
    if not found:
        local = Path(__file__).resolve().parents[2] / "node_modules" / ".bin" / "azurite-blob"
        found = str(local) if local.exists() else None
    return found if found and shutil.which("node") else None


class AzuriteServer:
    """Azurite's blob service in a process of its own, in memory, on a free port of 127.0.0.1."""

    def __init__(self, command: str | None = None, *, start_timeout: float = 120.0):
        self.command = command or find_azurite()
        if self.command is None:
            raise FileNotFoundError("Azurite is not installed (npm install azurite, or set LEROBOT_ZARR_AZURITE)")
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self._workdir: tempfile.TemporaryDirectory | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> AzuriteServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._workdir = tempfile.TemporaryDirectory(prefix="azurite-")
        # (telemetry off: Azurite 3.x sends it to Microsoft by default, and with it on a SIGTERM did not end the
        # process within 30 s: every test module using it paid 30 s at its end, waiting for the SIGKILL)
        self.proc = subprocess.Popen([self.command, "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                                      "--inMemoryPersistence", "--skipApiVersionCheck", "--disableTelemetry"],
                                     cwd=self._workdir.name,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while True:  # node starts in seconds, more on a busy machine
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                raise RuntimeError(f"Azurite ended at start (exit {self.proc.returncode}): {err}")
            if time.monotonic() > deadline:
                self.close()
                raise TimeoutError(f"Azurite did not listen on port {self.port} within {self.start_timeout:.0f} s")
            time.sleep(0.1)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def create_container(self, name: str) -> None:
        """A new container (3-63 lowercase letters, digits and dashes), by a Shared Key request."""
        date = email.utils.formatdate(usegmt=True)
        headers = {"x-ms-date": date, "x-ms-version": _VERSION}
        canonical = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        to_sign = "PUT\n" + "\n" * 11 + canonical + f"/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"
        signature = base64.b64encode(hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode(),
                                              hashlib.sha256).digest()).decode()
        request = urllib.request.Request(f"{self.endpoint}/{ACCOUNT}/{name}?restype=container", method="PUT",
                                         headers={**headers, "Content-Length": "0",
                                                  "Authorization": f"SharedKey {ACCOUNT}:{signature}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()

    def client_env(self) -> dict[str, str]:
        """The environment obstore (and the Azure tools) read: the account, its key, the emulator's URL."""
        return {"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
                "AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": self.endpoint}
