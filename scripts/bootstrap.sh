#!/usr/bin/env bash
# Create .venv with Python 3.12 and install lerobot_zarr (editable) with its test extra. Idempotent: reinstalls
# only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
find_python() {
  local cand
  # python3.12 on PATH, else one that pyenv or uv manages (pyenv's shim fails when 3.12 is not its version)
  local pyenv_root uv_python
  pyenv_root="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
  uv_python="$(uv python find 3.12 2>/dev/null || true)"
  for cand in python3.12 "$pyenv_root"/versions/3.12*/bin/python3.12 ${uv_python:+"$uv_python"}; do
    if "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
      echo "$cand"; return 0
    fi
  done
  echo "bootstrap: no working python3.12 found" >&2; return 1
}
if [ ! -x .venv/bin/python ]; then
  "$(find_python)" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
stamp=".venv/.lerobot_zarr-installed"
want="$(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # compat: the checkout goes on sys.path, so that a script run from the folder holding the checkout (itself
  # named lerobot_zarr) imports the package, not the checkout folder as an empty namespace package
  .venv/bin/python -m pip install -q -e ".[test]" --config-settings editable_mode=compat
  echo "$want" > "$stamp"
fi
# Azurite (Azure Blob Storage's emulator, from the npm registry) for the az:// tests, where npm is; without it
# those tests skip with a message
if command -v npm >/dev/null 2>&1 && [ ! -x node_modules/.bin/azurite-blob ]; then
  npm install --no-save --no-audit --no-fund --silent azurite@3.37.0 >/dev/null 2>&1 \
    || echo "bootstrap: npm install azurite failed; the az:// tests will skip" >&2
fi
