#!/usr/bin/env bash
# Run a command (default: the whole test suite) with a private TMPDIR and report its wall time, the peak disk
# that TMPDIR takes and the peak resident memory of its whole process tree (sampled every 2 s).
#
#   bash scripts/measure_suite.sh                      # .venv/bin/python -m pytest -q -p no:cacheprovider
#   bash scripts/measure_suite.sh -- CMD ARGS...       # any other command
#   KEEP=1 bash scripts/measure_suite.sh ...           # keep the temp folder and the samples afterwards
#
# Per-test figures (which test takes the disk, the memory, the time): set LEROBOT_ZARR_TEST_PROFILE=FILE.tsv
# for a pytest run (tests/_budget.py writes one line per test).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--" ]; then shift; fi
if [ $# -eq 0 ]; then set -- .venv/bin/python -m pytest -q -p no:cacheprovider; fi
work="$(mktemp -d "${MEASURE_DIR:-${TMPDIR:-/tmp}}/measure_suite.XXXXXX")"
mkdir -p "$work/tmp"
samples="$work/samples.tsv"
start=$(date +%s)
TMPDIR="$work/tmp" setsid "$@" &
pid=$!
peak_disk=0; peak_rss=0
while kill -0 "$pid" 2>/dev/null; do
  disk=$(du -sk "$work/tmp" 2>/dev/null | cut -f1)
  rss=$(ps -eo pgid=,rss= | awk -v g="$pid" '$1 == g {s += $2} END {print s + 0}')
  [ -n "$disk" ] && [ "$disk" -gt "$peak_disk" ] && peak_disk=$disk
  [ "$rss" -gt "$peak_rss" ] && peak_rss=$rss
  printf '%s\t%s\t%s\n' "$(( $(date +%s) - start ))" "${disk:-0}" "$rss" >> "$samples"
  sleep 2
done
wait "$pid"; rc=$?
echo "measure_suite: exit $rc, $(( $(date +%s) - start )) s, peak temp disk $(( peak_disk / 1024 )) MiB," \
     "peak RSS of the process tree $(( peak_rss / 1024 )) MiB"
if [ -n "${KEEP:-}" ]; then echo "measure_suite: kept $work (samples.tsv: seconds, KiB disk, KiB RSS)"; else rm -rf "$work"; fi
exit "$rc"
