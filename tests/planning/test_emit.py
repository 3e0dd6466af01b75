"""Issue 22, item 6: the SGLang launch command of a configuration (sacmodel.sglang_command, plan --emit sglang)
carries the settings the model used, and for the testbed the server_args its runs logged."""
import gzip
import json

import pytest
from launch_commands import parse
from measured_data import SHARED, needs_shared

import sacmodel
from sacmodel.cli import main
from sacmodel.data.server_logs import parse_server_args
from sacmodel.planning.common import SolverError
from sacmodel.planning.emit import sglang_command
from sacmodel.planning.pareto import with_dp
from sacmodel.serving.config import resolve

# flags of the testbed's fork (magicYang1573/sglang, hisparse-cxl-prefix-cache-opt-rdma, server_args.py)
FORK_FLAGS = {"--model-path", "--trust-remote-code", "--tp-size", "--dp-size", "--enable-dp-attention",
              "--load-balance-method", "--ep-size", "--mem-fraction-static", "--chunked-prefill-size", "--page-size",
              "--kv-cache-dtype", "--cuda-graph-max-bs", "--max-total-tokens", "--max-running-requests",
              "--quantization", "--enable-hisparse", "--hisparse-config", "--disable-piecewise-cuda-graph",
              "--piecewise-cuda-graph-max-tokens"}


def check_against_config(args: dict, topo, system: str, **res):
    """Every flag equals the resolved configuration's value (SGLang's launch form of it)."""
    cfg = resolve(topo, system, **res)
    assert set(args) <= FORK_FLAGS, set(args) - FORK_FLAGS
    assert int(args["--tp-size"]) == cfg.tp and int(args["--ep-size"]) == cfg.ep
    assert int(args.get("--dp-size", 1)) == cfg.dp and ("--enable-dp-attention" in args) == (cfg.dp > 1)
    assert float(args["--mem-fraction-static"]) == topo.param("mem_fraction")
    assert int(args["--chunked-prefill-size"]) // cfg.dp == cfg.prefill_chunk      # SGLang divides it by dp
    assert int(args["--page-size"]) == cfg.page and int(args["--cuda-graph-max-bs"]) == cfg.graph_bs
    # the fork graphs short prefills by default where it can (dp 1, dense attention): off unless the model's is on
    assert int(args.get("--piecewise-cuda-graph-max-tokens", 0)) == cfg.pcg_tokens
    assert ("--disable-piecewise-cuda-graph" in args) == (not cfg.pcg_tokens and cfg.dp == 1 and not cfg.model.sparse)
    assert args["--kv-cache-dtype"] == {"bf16": "bfloat16", "fp8": "fp8_e4m3"}[topo.serving["kv_dtype"].raw]
    setting = cfg.limits["setting"]
    assert int(args["--max-total-tokens"]) == setting if setting else "--max-total-tokens" not in args
    if "--max-running-requests" in args:
        assert int(args["--max-running-requests"]) // cfg.dp == cfg.max_running_requests
    assert ("--enable-hisparse" in args) == (system != "gpu")
    if system == "gpu":
        return
    hc = json.loads(args["--hisparse-config"])
    assert hc["top_k"] == cfg.model.topk and hc["device_buffer_size"] == cfg.device_buffer
    assert hc.get("host_to_device_ratio", 2) == topo.param("host_to_device_ratio")
    if system == "cxl":
        paths = hc["cxl"].get("dev_paths") or [hc["cxl"]["dev_path"]]
        assert hc["cxl"]["enabled"] and len(paths) == cfg.cxl_devices
        mapped = hc["cxl"].get("map_bytes_per_device") or hc["cxl"]["map_bytes"]
        assert mapped % (2 << 20) == 0 and mapped <= topo.node(topo.pools["cxl"][0])["capacity"]
    if system == "rdma":
        assert hc["rdma_pool"]["enabled"] and len(hc["rdma_pool"]["ib_devs"]) == cfg.rdma_nics
    assert ("cxl" in hc) == (system == "cxl") and ("rdma_pool" in hc) == (system == "rdma")


@pytest.mark.parametrize("system,res", [
    ("cxl", {}), ("cxl", {"cxl_devices": 1, "device_buffer": 6144}), ("dram", {"max_total_tokens": 250000}),
    ("rdma", {"rdma_nics": 1}), ("gpu", {}), ("dram", {"max_running_requests": 64}),
])
def test_each_flag_of_the_testbed_command_is_the_resolved_setting(system, res):
    args = parse(sglang_command("sac-testbed", system, **res))
    check_against_config(args, sacmodel.load_topology("sac-testbed"), system, **res)
    assert args["--model-path"] == "$MODEL_PATH"                 # an AWQ checkpoint: no public one to name
    if "max_running_requests" in res:
        assert args["--max-running-requests"] == str(64 * 8)


def test_other_machines_and_parallelisms():
    b200 = sacmodel.scenario("b200", dp=8, pool="cxl")
    args = parse(sglang_command(b200, "cxl"))
    check_against_config(args, b200, "cxl")
    assert args["--model-path"] == "deepseek-ai/DeepSeek-V3.2" and "--quantization" not in args
    r1 = sacmodel.scenario("h200", model="deepseek-r1")
    args = parse(sglang_command(r1, "gpu", dp=4))
    check_against_config(args, with_dp(r1, 4), "gpu")
    assert args["--dp-size"] == "4" and args["--tp-size"] == "8" and args["--model-path"] == "deepseek-ai/DeepSeek-R1"
    qwen = sacmodel.scenario("h100", model="qwen3-32b", gpus=2, weights="fp8")
    args = parse(sglang_command(qwen, "gpu"))
    check_against_config(args, qwen, "gpu")
    assert args["--quantization"] == "fp8" and args["--model-path"] == "Qwen/Qwen3-32B"   # FP8 from BF16 at load
    args = parse(sglang_command("sac-testbed", "cxl", cxl_devices=4, model_path="/models/DeepSeek-V3.2-AWQ"))
    assert len(json.loads(args["--hisparse-config"])["cxl"]["dev_paths"]) == 4       # the pool grown, as plan does
    assert args["--model-path"] == "/models/DeepSeek-V3.2-AWQ"
    args = parse(sglang_command("sac-testbed", "rdma", rdma_nics=4))
    assert json.loads(args["--hisparse-config"])["rdma_pool"]["ib_devs"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]


def test_what_ifs_and_unknown_settings_are_refused():
    with pytest.raises(SolverError, match="what-if"):
        sglang_command("sac-testbed", "cxl-prefetch")
    with pytest.raises(SolverError, match="unknown setting"):
        sglang_command("sac-testbed", "cxl", concurrency=64)


def _server_args(path):
    with gzip.open(path, "rt", errors="replace") as f:
        for line in f:
            if "server_args=ServerArgs(" in line:
                return parse_server_args(line)
    return None


def _run_settings(sa: dict) -> tuple[str, dict]:
    """The system and server settings a testbed run used, read from its server_args."""
    hc = sa["hisparse_config"] if sa.get("enable_hisparse") else None
    res = {"max_total_tokens": sa["max_total_tokens"], "model_path": sa["model_path"]}
    if hc is None:
        return "gpu", res
    res["device_buffer"] = hc["device_buffer_size"]
    if "cxl" in hc:
        return "cxl", {**res, "cxl_devices": len(hc["cxl"].get("dev_paths") or [hc["cxl"]["dev_path"]])}
    if "rdma_pool" in hc:
        return "rdma", {**res, "rdma_nics": len(hc["rdma_pool"]["ib_devs"])}
    return "dram", res


@needs_shared
def test_the_testbed_command_reproduces_the_server_args_of_every_run():
    logs = sorted((SHARED / "sac-testbed" / "server-logs").glob("*.log.gz"))
    if not logs:
        pytest.skip(f"no server logs in {SHARED / 'sac-testbed' / 'server-logs'}")
    seen = set()
    for path in logs:
        sa = _server_args(path)
        assert sa, path.name
        system, res = _run_settings(sa)
        seen.add(system)
        args = parse(sglang_command("sac-testbed", system, **res))
        dp = int(args["--dp-size"])
        assert args["--model-path"] == sa["model_path"] and sa["trust_remote_code"] is True
        assert (sa["tp_size"], sa["dp_size"], sa["ep_size"]) == (int(args["--tp-size"]), dp, int(args["--ep-size"]))
        assert sa["enable_dp_attention"] is True and "--enable-dp-attention" in args
        assert sa["load_balance_method"] == args["--load-balance-method"]
        assert sa["mem_fraction_static"] == float(args["--mem-fraction-static"])
        assert sa["chunked_prefill_size"] == int(args["--chunked-prefill-size"]) // dp   # logged after the division
        assert (sa["page_size"], sa["cuda_graph_max_bs"], sa["max_total_tokens"]) == \
            (int(args["--page-size"]), int(args["--cuda-graph-max-bs"]), int(args["--max-total-tokens"]))
        assert sa["kv_cache_dtype"] == args["--kv-cache-dtype"] and sa["quantization"] is None
        assert "--quantization" not in args and sa["max_running_requests"] is None
        assert "--max-running-requests" not in args
        assert bool(sa["enable_hisparse"]) == ("--enable-hisparse" in args)
        if sa["enable_hisparse"]:                                       # the same JSON, key for key
            assert json.loads(args["--hisparse-config"]) == sa["hisparse_config"], path.name
    assert seen == {"gpu", "dram", "cxl", "rdma"}


def test_plan_emits_the_command_of_its_answer(capsys):
    rc = main(["plan", "--system", "cxl", "--context", "128K", "--slo", "tbt_mean_ms=80", "--emit", "sglang",
               "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    d = json.loads(out)
    assert d["found"] and d["value"] > 2                 # more devices than the testbed's pool holds
    args = parse(d["sglang_command"])
    assert len(json.loads(args["--hisparse-config"])["cxl"]["dev_paths"]) == d["value"]
    assert d["prediction"]["config"]["cxl_devices"] == d["value"]
    rc = main(["plan", "--system", "cxl", "--context", "32K", "--slo", "tbt_mean_ms=80", "--emit", "sglang"])
    out = capsys.readouterr().out
    assert rc == 0 and "smallest cxl_devices meeting the SLO: 1" in out
    args = parse(out[out.index("# sacmodel: cxl"):])
    check_against_config(args, sacmodel.load_topology("sac-testbed"), "cxl", cxl_devices=1)


# issue 36 (Launch commands): safe to paste, ranges checked, the model of the plan, the fork named


@pytest.mark.parametrize("kw", [dict(max_total_tokens=10 ** 20), dict(max_total_tokens=0), dict(dp=True),
                                dict(cxl_devices=2.5), dict(rdma_nics=-1), dict(max_running_requests=2 ** 40),
                                dict(device_buffer="4096")])
def test_settings_out_of_range_are_refused_naming_them(kw):
    (k, v), = kw.items()
    with pytest.raises(ValueError, match=k):
        sglang_command("sac-testbed", "cxl", **kw)


@pytest.mark.parametrize("bad", ["a\nrm -rf ~", "x\rY", "p\x1b[2J", "q\u2028r"])
def test_control_characters_in_names_are_refused(bad):
    import copy
    with pytest.raises(ValueError, match="control character"):
        sglang_command("sac-testbed", "gpu", model_path=bad)
    t = copy.deepcopy(sacmodel.load_topology("sac-testbed"))
    t.name = bad
    with pytest.raises(ValueError, match="scenario name"):
        sglang_command(t, "gpu")


def test_every_line_is_a_comment_or_part_of_the_command():
    text = sglang_command("sac-testbed", "cxl", model_path="/models/my model's; $(reboot)")
    cmd = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert all(ln.endswith("\\") for ln in cmd[:-1]) and not cmd[-1].endswith("\\")
    assert parse(text)["--model-path"] == "/models/my model's; $(reboot)"      # quoted: one word, nothing run


@pytest.mark.parametrize("system,key", [("cxl", "cxl"), ("rdma", "rdma_pool")])
def test_the_comment_says_the_pool_keys_are_the_sac_forks(system, key):
    comments = " ".join(ln for ln in sglang_command("sac-testbed", system).splitlines() if ln.startswith("#"))
    assert f"the {key} key" in comments and "only in the SAC fork" in comments
    gpu = " ".join(ln for ln in sglang_command("sac-testbed", "gpu").splitlines() if ln.startswith("#"))
    assert "fork" not in gpu


def test_plan_emit_with_model_prints_that_models_settings(capsys):
    assert main(["plan", "--system", "gpu", "--context", "8K", "--concurrency", "4", "--requests", "8",
                 "--slo", "tbt_mean_ms=1000", "--emit", "sglang", "--model", "llama-3.1-8b"]) == 0
    out = capsys.readouterr().out
    text = out[out.index("# sacmodel:"):]
    assert "llama-3.1-8b" in text.splitlines()[0] and "deepseek" not in text.lower()
    assert parse(text)["--page-size"] == "1"             # SGLang: page size 1 for a dense model (64 only for DSA)


def test_an_instance_across_hosts_launches_with_deepep_and_its_node_count():
    """LMSYS's decode servers (sgl-project/sglang#6017): DeepEP low-latency, two-batch overlap, 32 redundant
    experts, one server over 9 hosts (--nnodes 9, each host its --node-rank)."""
    import sacmodel
    t = sacmodel.scenario("h100", gpus=72, model="deepseek-v3", dp=72, ep=72, moe_a2a="deepep",
                          deepep_mode="low_latency", two_batch_overlap=True, ep_redundant=32, mem_fraction=0.85,
                          moe_dense_tp=1)
    cmd = sacmodel.sglang_command(t, "gpu")
    for flag in ("--moe-a2a-backend deepep", "--deepep-mode low_latency", "--enable-two-batch-overlap",
                 "--ep-num-redundant-experts 32", "--moe-dense-tp-size 1", "--nnodes 9", "--node-rank 0..8"):
        assert flag in cmd, flag
    one = sacmodel.sglang_command(sacmodel.scenario("h200", gpus=8, model="deepseek-v3"), "gpu")
    assert "--nnodes" not in one and "--moe-a2a-backend" not in one and "--moe-dense-tp-size" not in one


def test_the_fp8_gemm_backend_a_scenario_names_is_launched():
    """A machine built with FlashInfer's FP8 GEMM (DeepGEMM off) launches SGLang with --fp8-gemm-backend
    flashinfer_trtllm; SGLang's default (auto) adds no flag."""
    import sacmodel
    from sacmodel.planning.emit import sglang_args
    fi = sacmodel.scenario("b200", model="deepseek-r1", fp8_gemm_backend="flashinfer_trtllm")
    assert sglang_args(fi, "gpu")[0]["--fp8-gemm-backend"] == "flashinfer_trtllm"
    assert "--fp8-gemm-backend" not in sglang_args(sacmodel.scenario("b200", model="deepseek-r1"), "gpu")[0]
