"""``--gpu h200 --gpus 8 --weights fp8 --dp 8 ...`` on every command that takes ``--scenario``, and
``scenarios --build``."""
import json

import pytest

from sacmodel.cli.app import build_parser, main
from sacmodel.cli.machine import FLAGS
from sacmodel.hardware.scenarios import load_topology


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_command_with_a_scenario_takes_the_machine_flags():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    with_scenario = [n for n, p in commands.items() if "--scenario" in p._option_string_actions]
    assert {"predict", "compare", "plan", "sweep", "breakeven", "sensitivity", "winner-map"} <= set(with_scenario)
    for name in with_scenario:
        opts = commands[name]._option_string_actions
        missing = [f for f in FLAGS if f not in opts]
        assert not missing, (name, missing)


def test_predict_on_a_described_machine(capsys):
    rc, out, err = run(capsys, "predict", "--gpu", "h200", "--gpus", "8", "--weights", "fp8", "--dp", "8",
                       "--system", "gpu", "--context", "32K", "--json")
    d = json.loads(out)
    assert rc == 0 and d["feasible"] and d["scenario"] == "h200x8-deepseek-v3.2-fp8-dp8"
    assert d["config"]["dp"] == 8 and 0 < d["tbt_mean_ms"] < d["ttft_mean_ms"]


def test_the_fp8_gemm_backend_flag_slows_a_b200_prefill_to_flashinfer_s_rate(capsys):
    """--fp8-gemm-backend flashinfer_trtllm (what SGLang runs with JIT DeepGEMM off) prefills an 8K prompt at
    440 TFLOP/s instead of DeepGEMM's class: a longer first token, the same decode."""
    ttft, tbt = {}, {}
    for backend in ("auto", "flashinfer_trtllm"):
        rc, out, _ = run(capsys, "predict", "--gpu", "b200", "--model", "deepseek-r1", "--fp8-gemm-backend", backend,
                         "--system", "gpu", "--context", "8K", "--output", "64", "--concurrency", "1", "--json")
        d = json.loads(out)
        assert rc == 0 and d["feasible"]
        ttft[backend], tbt[backend] = d["ttft_mean_ms"], d["tbt_mean_ms"]
    assert ttft["flashinfer_trtllm"] > 1.2 * ttft["auto"] and tbt["flashinfer_trtllm"] == pytest.approx(tbt["auto"])


def test_compare_and_sensitivity_on_a_described_machine(capsys):
    rc, out, _ = run(capsys, "compare", "--gpu", "b200", "--dp", "8", "--pool", "cxl", "--systems", "gpu,cxl",
                     "--contexts", "32K", "--json")
    row = json.loads(out)[0]
    assert rc == 0 and row["gpu"]["scenario"] == "b200x8-deepseek-v3.2-fp8-dp8" and row["cxl"]["feasible"]
    # a small workload (8 in flight, 16 requests, 128 output tokens): the described machine's constants and
    # hardware numbers are ranked at any load, and the default one (64 in flight, 512 requests) took 14 CPU s
    rc, out, _ = run(capsys, "sensitivity", "--gpu", "h200", "--model", "deepseek-r1", "--system", "gpu",
                     "--context", "8K", "--concurrency", "8", "--requests", "16", "--output", "128", "--json")
    names = [r["parameter"] for r in json.loads(out)["rows"]]
    assert rc == 0 and "t_graph_kernel" in names and "node:gpu.hbm_bandwidth" in names


@pytest.mark.parametrize("argv,msg", [
    (["predict", "--system", "gpu", "--context", "8K", "--dp", "8"], "--dp describes a machine: give --gpu"),
    (["predict", "--gpu", "h200", "--scenario", "sac-testbed.yaml", "--system", "gpu", "--context", "8K"],
     "either --scenario or --gpu"),
    (["predict", "--gpu", "a100", "--system", "gpu", "--context", "8K"], "unknown GPU 'a100'"),
    (["predict", "--gpu", "h200", "--dp", "3", "--system", "gpu", "--context", "8K"], "dp=3 must divide tp=8"),
    (["predict", "--gpu", "h200", "--weights", "int2", "--system", "gpu", "--context", "8K"], "invalid choice"),
    (["predict", "--gpu", "h200", "--model", "deepseek-r1", "--fp8-gemm-backend", "flashinfer_trtllm", "--system",
      "gpu", "--context", "8K"], "flashinfer_trtllm needs a Blackwell GPU"),
])
def test_bad_machine_flags_exit_2_with_one_line(capsys, argv, msg):
    rc, _, err = run(capsys, *argv)
    assert rc == 2 and msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_scenarios_build_writes_a_scenario_that_loads(capsys, tmp_path):
    rc, out, _ = run(capsys, "scenarios", "--build", "--gpu", "h200", "--dp", "8", "--weights", "fp8")
    assert rc == 0 and out.startswith("# Built by sacmodel.scenario(")
    path = tmp_path / "h200.yaml"
    path.write_text(out)
    t = load_topology(path)
    assert t.param("dp") == 8 and t.serving["weights"].raw == "fp8"
    rc, out, _ = run(capsys, "predict", "--scenario", str(path), "--system", "gpu", "--context", "16K", "--json")
    assert rc == 0 and json.loads(out)["feasible"]
    rc, _, err = run(capsys, "scenarios", "--build")
    assert rc == 2 and "--build needs --gpu" in err


def test_gpus_lists_the_catalog(capsys):
    rc, out, _ = run(capsys, "gpus", "--json")
    names = {r["name"] for r in json.loads(out)}
    assert rc == 0 and {"h20", "h100", "h200", "b200"} <= names


def test_one_gpu_on_the_command_line(capsys):
    rc, out, err = run(capsys, "predict", "--gpu", "h100", "--gpus", "1", "--model", "llama-3.1-8b", "--weights",
                       "bf16", "--system", "gpu", "--context", "4K", "--json")
    d = json.loads(out)
    assert rc == 0 and d["feasible"] and d["scenario"] == "h100x1-llama-3.1-8b-bf16"
    assert 0 < d["tbt_mean_ms"] < d["ttft_mean_ms"]


@pytest.mark.parametrize("argv,msg", [
    (["--gpu", "h200", "--cxl-devices", "4"], "cxl_devices=4 sizes the cxl pool, but the machine has none"),
    (["--gpu", "h200", "--rdma-nics", "2"], "rdma_nics=2 sizes the rdma pool, but the machine has none"),
    (["--gpu", "h200", "--weights", "fp4"], "weights='fp4' needs FP4 tensor cores (Blackwell, SM100)"),
    (["--gpu", "h200", "--model", "llama-3.1-70b", "--ep", "2"], "ep=2 splits a model's experts"),
    (["--gpu", "h200", "--gpus", "64", "--dp", "64", "--model", "deepseek-r1"],
     "147,456 MiB of it for DP attention with dp=64"),
    (["--gpu", "h200", "--gpus", "12", "--model", "deepseek-r1"], "give a multiple of 8"),
    (["--gpu", "h100", "--gpus", "1"], "does not fit on 1 x H100"),
])
def test_contradictory_machines_exit_2_with_one_line(capsys, argv, msg):
    rc, _, err = run(capsys, "predict", *argv, "--system", "gpu", "--context", "8K")
    assert rc == 2 and msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_config_with_a_zero_size_exits_2_naming_the_field(capsys, tmp_path):
    from sacmodel.hardware.models import CATALOG_CONFIGS
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**{k: v for k, v in CATALOG_CONFIGS["deepseek-v3"].items() if not k.startswith("_")},
                                "moe_intermediate_size": 0}))
    rc, _, err = run(capsys, "predict", "--gpu", "h200", "--model", str(path), "--system", "gpu", "--context", "8K")
    assert rc == 2 and "'moe_intermediate_size' must be positive" in err and len(err.strip().splitlines()) == 1


def test_an_expert_parallel_instance_across_hosts_from_the_flags(capsys):
    """LMSYS's decode servers in flags: 72 x H100 over 9 hosts, DeepEP low-latency, two-batch overlap, 32 EPLB
    replicas, a given mem_fraction (the flag's type had broken it). DeepEP without DP attention over every GPU
    is refused with SGLang's rule, exit status 2, one line."""
    rc, out, _ = run(capsys, "scenarios", "--build", "--gpu", "h100", "--gpus", "72", "--model", "deepseek-v3",
                     "--dp", "72", "--ep", "72", "--ep-redundant", "32", "--moe-a2a", "deepep", "--deepep-mode",
                     "low_latency", "--two-batch-overlap", "--mem-fraction", "0.85", "--cuda-graph-max-bs", "256")
    assert rc == 0 and "moe_a2a" in out and "two_batch_overlap" in out and "9 hosts of 8" in out
    rc, out, err = run(capsys, "predict", "--system", "gpu", "--gpu", "h100", "--gpus", "16", "--model",
                       "deepseek-v3", "--moe-a2a", "deepep", "--mem-fraction", "0.85", "--context", "2K")
    assert rc == 2 and "sets ep_size = tp_size" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_engine_version_flag_reaches_the_built_machine(capsys):
    """--engine-version is scenario(engine_version=): an SGLang before 0.5.9 prefills R1's routed experts more
    slowly on H200 (its Triton fused MoE), so a longer first token; a release that is not one is refused."""
    kw = ["predict", "--gpu", "h200", "--model", "deepseek-r1", "--system", "gpu", "--context", "8K",
          "--concurrency", "1", "--requests", "2", "--json"]
    rc, new, _ = run(capsys, *kw)
    rc_old, old, _ = run(capsys, *kw, "--engine-version", "0.5.3")
    assert rc == rc_old == 0
    assert json.loads(old)["ttft_mean_ms"] > json.loads(new)["ttft_mean_ms"]
    rc, _, err = run(capsys, *kw, "--engine-version", "0.5.x")
    assert rc == 2 and "engine_version must be a release" in err and len(err.strip().splitlines()) == 1
