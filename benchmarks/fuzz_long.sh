#!/bin/sh
# The long fuzz run of issue 36 (benchmarks/fuzz.md, "Final run (issue 36)"): each generator of tests/fuzz in its
# own pytest session (its counts printed as soon as it ends), the generators of a stream one after the other.
# Usage: sh benchmarks/fuzz_long.sh EXAMPLES SEED LOG "file.py::test_a file.py::test_b ..."
N=${1:-1100}
SEED=${2:-3612}
LOG=${3:-fuzz_long.log}
for t in $4; do
  echo "=== $t start $(date -u +%H:%M:%S)"
  SACMODEL_FUZZ_LONG_EXAMPLES=$N python3 -m pytest -p no:cacheprovider "tests/fuzz/$t" --fuzz-long \
    --hypothesis-seed="$SEED" -q 2>&1 | grep -v "^\s*$" | grep -v "durations\|^[0-9.]*s \(call\|setup\|teardown\)"
  echo "=== $t end $(date -u +%H:%M:%S)"
done >> "$LOG" 2>&1
