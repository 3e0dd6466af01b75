#!/bin/sh
# The long fuzz run of issue 36 (benchmarks/fuzz.md, "Final run (issue 36)"): every generator of tests/fuzz in
# its own pytest session, in two streams side by side (one per core), so that each generator's counts are
# printed as soon as it ends. Usage: sh benchmarks/fuzz_long.sh EXAMPLES SEED LOG_PREFIX
N=${1:-1100}
SEED=${2:-3612}
LOG=${3:-fuzz_long}
A="test_fuzz_surfaces.py::test_fuzz_bench_files test_fuzz_surfaces.py::test_fuzz_cluster_plan_prices
test_fuzz_surfaces.py::test_fuzz_writers test_fuzz_inputs.py::test_fuzz_scenario_yaml
test_fuzz_inputs.py::test_fuzz_traces test_fuzz_inputs.py::test_fuzz_run_json
test_fuzz_inputs.py::test_fuzz_microbench_json test_fuzz_inputs.py::test_fuzz_cli_values
test_fuzz_reach.py::test_fuzz_cluster_yaml test_fuzz_surfaces.py::test_fuzz_sensitivity_api
test_fuzz_reach.py::test_fuzz_input_paths"
B="test_fuzz_surfaces.py::test_fuzz_multihost test_fuzz_surfaces.py::test_fuzz_machine
test_fuzz_surfaces.py::test_fuzz_launch_command test_fuzz_surfaces.py::test_fuzz_price_table
test_fuzz_surfaces.py::test_fuzz_hostile_trace test_fuzz_surfaces.py::test_fuzz_shared_prefix
test_fuzz_reach.py::test_fuzz_model_config test_fuzz_reach.py::test_fuzz_run_json_replay
test_fuzz_reach.py::test_fuzz_server_logs test_fuzz_reach.py::test_fuzz_python_api
test_fuzz_reach.py::test_fuzz_output_paths"
stream() {
  for t in $1; do
    echo "=== $t start $(date -u +%H:%M:%S)"
    SACMODEL_FUZZ_LONG_EXAMPLES=$N python3 -m pytest -p no:cacheprovider "tests/fuzz/$t" --fuzz-long \
      --hypothesis-seed="$SEED" -q 2>&1 | grep -v "^\s*$" | grep -v "durations\|^[0-9.]*s \(call\|setup\|teardown\)"
    echo "=== $t end $(date -u +%H:%M:%S)"
  done
}
stream "$A" > "$LOG.a.log" 2>&1 &
stream "$B" > "$LOG.b.log" 2>&1 &
wait
