#!/usr/bin/env bash
# Decisions must not change with a speed-up: run bench_cycle.py's cycle with this checkout's engine and with
# another checkout's (default /work/main), dump both records, and compare them byte for byte.
#
#     bash benchmarks/compare_records.sh [OTHER_CHECKOUT] [bench_cycle.py arguments...]
#
# Both runs use this checkout's bench_cycle.py (for --dump-record); PYTHONPATH picks the engine. Exits 0 and
# prints "records identical" when the two records are the same bytes, 1 (with a short diff) otherwise.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
other="${1:-/work/main}"
shift || true
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
PYTHONPATH="$here" python3 "$here/benchmarks/bench_cycle.py" --dump-record "$out/this.json" "$@" | grep -E "bench: (reclaim|cycle) "
PYTHONPATH="$other" python3 "$here/benchmarks/bench_cycle.py" --dump-record "$out/other.json" "$@" | grep -E "bench: (reclaim|cycle) "
if cmp -s "$out/this.json" "$out/other.json"; then
  echo "records identical ($(wc -c <"$out/this.json") bytes)"
else
  echo "records DIFFER"
  diff <(python3 -m json.tool "$out/this.json") <(python3 -m json.tool "$out/other.json") | head -40
  exit 1
fi
