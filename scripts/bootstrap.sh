#!/usr/bin/env bash
# Create .venv with Python 3.12 and install lerobot_zarr with its test extra. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
find_python() {
  for cand in python3.12 "$(command -v pyenv >/dev/null && pyenv root 2>/dev/null)/versions/"3.12*/bin/python3.12; do
    if [ -n "$cand" ] && "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  for cand in /root/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do
    if [ -x "$cand" ]; then echo "$cand"; return 0; fi
  done
  echo "no Python 3.12 found" >&2; return 1
}
if [ ! -x .venv/bin/python ]; then
  "$(find_python)" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
.venv/bin/python -m pip install -q -e ".[test]"
