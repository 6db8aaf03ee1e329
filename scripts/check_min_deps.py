"""Check that the lower bounds in pyproject.toml are real: install exactly those versions into a fresh venv and run
a smoke test of the library against them (not in CI: it downloads and installs a whole environment, ~2-5 min).

    python3.12 scripts/check_min_deps.py [--venv DIR] [--keep] [pytest args...]

Each runtime dependency ``name>=X`` (or ``name>=X,<Y``) is installed at the lowest release ``>= X`` (one ``pip
index versions`` look-up per dependency); the test tools (pytest, hypothesis, and PyAV, which the real datasets'
tests expect) come at their latest. lerobot_zarr itself is imported from this checkout (PYTHONPATH), not installed.
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
SMOKE = ["tests/sampling/test_lerobot_semantics.py", "tests/store/test_store_format.py", "tests/hub/test_open_from_hub.py",
         "tests/cli/test_cli.py", "tests/sampling/test_stream.py", "tests/writing/test_writer.py", "tests/store/test_cache.py"]


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def lowest(python: Path, name: str, bound: str) -> str:
    """The lowest released version of ``name`` that is ``>= bound`` (a bound like ``2024.1`` need not be a
    release itself), from the package index pip is configured with."""
    listing = subprocess.run([str(python), "-m", "pip", "index", "versions", name, "--disable-pip-version-check"],
                             check=True, capture_output=True, text=True).stdout
    m = re.search(r"Available versions:\s*(.+)", listing)
    if not m:
        raise SystemExit(f"check_min_deps: no versions of {name} found:\n{listing}")
    versions = [v.strip() for v in m.group(1).split(",") if re.fullmatch(r"[0-9.]+", v.strip())]
    ok = [v for v in versions if _key(v) >= _key(bound)]
    if not ok:
        raise SystemExit(f"check_min_deps: no release of {name} >= {bound}")
    return min(ok, key=_key)


def lower_bounds() -> list[tuple[str, str]]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = []
    for dep in deps:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\[\]-]+)\s*>=\s*([0-9][^,;\s]*)\s*(,.*)?", dep)
        if not m:
            raise SystemExit(f"check_min_deps: cannot read a lower bound from {dep!r}")
        out.append((m.group(1), m.group(2)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=None, help="venv folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the venv")
    args, pytest_args = parser.parse_known_args()
    venv = args.venv or Path(tempfile.mkdtemp(prefix="lerobot_zarr-min-deps-"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pins = [f"{name}=={lowest(venv / 'bin' / 'python', name, bound)}" for name, bound in lower_bounds()]
        print("lowest versions the bounds allow:", " ".join(pins), flush=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *pins, "pytest", "hypothesis", "av"], check=True)
        frozen = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze"], check=True,
                                capture_output=True, text=True).stdout
        print("installed:", " ".join(line for line in frozen.split() if "==" in line), flush=True)
        env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(venv)}
        result = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 *(pytest_args or SMOKE)], cwd=ROOT, env=env, check=False)
        return result.returncode
    finally:
        if args.venv is None and not args.keep:
            shutil.rmtree(venv, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
