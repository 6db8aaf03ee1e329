"""Check that the lower bounds in pyproject.toml are real: install exactly those versions into a fresh venv and run
a smoke test of the library against them (not in CI: it downloads and installs a whole environment, ~2-5 min).

    python3.12 scripts/check_min_deps.py [--venv DIR] [--keep] [pytest args...]

Each runtime dependency ``name>=X`` (or ``name>=X,<Y``) is installed as ``name==X``; the test tools (pytest,
hypothesis) come at their latest. lerobot_zarr itself is imported from this checkout (PYTHONPATH), not installed.
The smoke test is a set of test modules that exercise every dependency: zarr (store, xarray-free paths), numcodecs
(compact cameras), pyarrow (LeRobot parquet), huggingface_hub (the test Hub), numpy, pillow. Exit code: pytest's.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["tests/test_windows.py", "tests/test_store_format.py", "tests/test_hub_open.py", "tests/test_cli.py",
         "tests/test_stream.py", "tests/test_writer.py", "tests/test_cache.py"]


def minimum_pins() -> list[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = []
    for dep in deps:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\[\]-]+)\s*>=\s*([0-9][^,;\s]*)\s*(,.*)?", dep)
        if not m:
            raise SystemExit(f"check_min_deps: cannot read a lower bound from {dep!r}")
        pins.append(f"{m.group(1)}=={m.group(2)}")
    return pins


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=None, help="venv folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the venv")
    args, pytest_args = parser.parse_known_args()
    venv = args.venv or Path(tempfile.mkdtemp(prefix="lerobot_zarr-min-deps-"))
    pins = minimum_pins()
    print("minimum versions:", " ".join(pins), flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *pins, "pytest", "hypothesis"], check=True)
        frozen = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze"], check=True,
                                capture_output=True, text=True).stdout
        print("installed:", " ".join(line for line in frozen.split() if "==" in line), flush=True)
        env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(venv)}
        result = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 *(pytest_args or SMOKE)], cwd=ROOT, env=env)
        return result.returncode
    finally:
        if args.venv is None and not args.keep:
            shutil.rmtree(venv, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
