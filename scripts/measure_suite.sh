#!/usr/bin/env bash
# Run a command (default: the whole test suite) with a private TMPDIR and report its wall time, the peak disk
# that TMPDIR takes, the peak memory of its whole process tree (PSS, a page forked processes share counted once;
# and the sum of the processes' RSS) and the machine's load average while it ran (1-minute load, sampled every
# 2 s: its mean and peak; timings mean little without it).
#
#   bash scripts/measure_suite.sh                      # the suite as CI runs it (pytest -n 3 --dist loadfile)
#   bash scripts/measure_suite.sh -- CMD ARGS...       # any other command
#   KEEP=1 bash scripts/measure_suite.sh ...           # keep the temp folder and the samples afterwards
#   BUSY=2 bash scripts/measure_suite.sh ...           # with 2 CPU-bound processes beside it (the suite must pass
#                                                      # so on 2 cores, in under 10 minutes)
#
# Per-test figures (which test takes the disk, the memory, the time): set LEROBOT_ZARR_TEST_PROFILE=FILE.tsv
# for a pytest run (tests/_budget.py writes one line per test).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--" ]; then shift; fi
if [ $# -eq 0 ]; then set -- .venv/bin/python -m pytest -q -p no:cacheprovider -n 3 --dist loadfile; fi
work="$(mktemp -d "${MEASURE_DIR:-${TMPDIR:-/tmp}}/measure_suite.XXXXXX")"
mkdir -p "$work/tmp"
samples="$work/samples.tsv"
busy=()
for _ in $(seq 1 "${BUSY:-0}"); do sh -c 'while :; do :; done' & busy+=($!); done
trap 'if [ ${#busy[@]} -gt 0 ]; then kill "${busy[@]}" 2>/dev/null; fi' EXIT
start=$(date +%s)
TMPDIR="$work/tmp" setsid "$@" &
pid=$!
peak_disk=0; peak_rss=0; peak_pss=0
while kill -0 "$pid" 2>/dev/null; do
  load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
  disk=$(du -sk "$work/tmp" 2>/dev/null | cut -f1)
  rss=$(ps -eo pgid=,rss= | awk -v g="$pid" '$1 == g {s += $2} END {print s + 0}')
  # PSS: a page that forked processes share counted once (the RAM the run takes; the RSS sum counts it per process)
  pss=$(for p in $(ps -eo pid=,pgid= | awk -v g="$pid" '$2 == g {print $1}'); do
          grep -s '^Pss:' "/proc/$p/smaps_rollup"; done | awk '{s += $2} END {print s + 0}')
  [ -n "$disk" ] && [ "$disk" -gt "$peak_disk" ] && peak_disk=$disk
  [ "$rss" -gt "$peak_rss" ] && peak_rss=$rss
  [ "$pss" -gt "$peak_pss" ] && peak_pss=$pss
  printf '%s\t%s\t%s\t%s\t%s\n' "$(( $(date +%s) - start ))" "${disk:-0}" "$rss" "$load" "$pss" >> "$samples"
  sleep 2
done
wait "$pid"; rc=$?
loads=$(awk -F'\t' '{s += $4; if ($4 > m) m = $4} END {if (NR) printf "mean %.1f, peak %.1f", s / NR, m}' "$samples")
echo "measure_suite: exit $rc, $(( $(date +%s) - start )) s, peak temp disk $(( peak_disk / 1024 )) MiB," \
     "peak memory of the process tree: PSS $(( peak_pss / 1024 )) MiB (RSS summed $(( peak_rss / 1024 )) MiB)," \
     "load average ${loads:-unknown} on $(nproc) cores" \
     "(${BUSY:-0} CPU-bound processes beside it)"
if [ -n "${KEEP:-}" ]; then
  echo "measure_suite: kept $work (samples.tsv: seconds, KiB disk, KiB RSS, 1-minute load, KiB PSS)"
else
  rm -rf "$work"
fi
exit "$rc"
