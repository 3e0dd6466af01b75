"""SGLang's piecewise CUDA graph (its default from v0.5.10 on, ``--disable-piecewise-cuda-graph`` to turn it off):
a prefill batch of at most ``piecewise_cuda_graph_max_tokens`` tokens replays captured graphs between the layers'
attention ops, so only attention launches from Python. Hand-computed launch savings, where it applies, where
SGLang turns it off, and its flag, column and launch-command forms."""
import pytest

from sacmodel import predict, scenario
from sacmodel.cli import main
from sacmodel.data.external import load_external_runs
from sacmodel.data.records import DataError
from sacmodel.hardware.sizing import decode_kernels, piecewise_eager_kernels
from sacmodel.hardware.topology import TopologyError
from sacmodel.planning.emit import sglang_command
from sacmodel.serving.config import ConfigError, resolve
from sacmodel.serving.engine.stepmodel import Model

COLD = dict(output=64, concurrency=1, requests=1, prompts="distinct", prefix_cached=False)


def _r1(pcg: bool):
    return scenario("h200", model="deepseek-r1", weights="fp8", piecewise_cuda_graph=pcg)


def test_saved_launches_by_hand():
    """Eager prefill: layers x n_kernels x (t_launch - t_graph_kernel); under the graph only the attention's
    3 launches per layer stay: 61 x (23 - 3) x (t_launch - t_graph_kernel)."""
    m = Model(resolve(_r1(True), "gpu"))
    v = m.v
    assert decode_kernels(m.cfg.model) == 23 and piecewise_eager_kernels(m.cfg.model) == 3
    per = v["t_launch"] - v["t_graph_kernel"]
    assert m.t_eager == pytest.approx(61 * 23 * per, rel=1e-12)
    assert m.t_eager_pcg == pytest.approx(61 * 3 * per, rel=1e-12)
    assert m.pcg_tokens == 2048                  # MLA backends: SGLang caps the graph at 2048 tokens


@pytest.mark.parametrize("method", ["engine", "analytic"])
@pytest.mark.parametrize("context,graphed", [(1000, True), (2048, True), (2049, False), (6000, False)])
def test_lone_cold_prompt_gains_the_saved_launches(method, context, graphed):
    """A lone prompt is prefilled in one iteration: its TTFT falls by exactly what the graph saves of that
    iteration (its launches overlapped with its GPU work G: max(G + t_launch, launches + t_graph_kernel)) when it
    fits the graph, and not at all above the cap."""
    off, on = (predict(_r1(p), "gpu", context=context, method=method, **COLD) for p in (False, True))
    m = Model(resolve(_r1(True), "gpu"))
    gpu = m.prefill(context, 0, True) + m.shared(context, True, context, 1)
    saved = 1e3 * (m.overlapped(gpu, m.t_eager) - m.overlapped(gpu, m.t_eager_pcg)) if graphed else 0.0
    assert off.ttft_mean_ms - on.ttft_mean_ms == pytest.approx(saved, abs=1e-6 if method == "engine" else 0.01)
    # decode ran as a CUDA graph already (the analytic form spreads the prefill iteration over the steps)
    assert on.tbt_mean_ms == pytest.approx(off.tbt_mean_ms, rel=1e-9 if method == "engine" else 1e-3)


def test_loaded_server_is_not_slower_with_the_graph():
    work = dict(context=1024, output=(200, 300), prompts="distinct", prefix_cached=False, concurrency=16,
                requests=96, draws=1)
    off, on = (predict(_r1(p), "gpu", **work) for p in (False, True))
    assert on.ttft_mean_ms < off.ttft_mean_ms
    assert on.tbt_mean_ms <= off.tbt_mean_ms * 1.001
    assert on.output_throughput_tok_s >= off.output_throughput_tok_s * 0.999


def test_dense_gqa_model_graphs_up_to_the_chunk():
    t = scenario("h100", gpus=2, model="qwen3-32b", weights="bf16", piecewise_cuda_graph=True)
    assert resolve(t, "gpu").pcg_tokens == resolve(t, "gpu").prefill_chunk


@pytest.mark.parametrize("kw,why", [(dict(model="deepseek-r1", dp=8), "DP attention"),
                                    (dict(model="deepseek-v3.2"), "sparse attention")])
def test_sglang_runs_no_piecewise_graph_here(kw, why):
    with pytest.raises(TopologyError, match=why):
        scenario("h200", piecewise_cuda_graph=True, **kw)


def test_scenario_file_with_the_setting_under_dp_attention_is_refused(tmp_path):
    from sacmodel.hardware.build import scenario_yaml
    text = scenario_yaml(gpu="h200", model="deepseek-r1", dp=8).replace(
        "serving:\n", "serving:\n  piecewise_cuda_graph_max_tokens: {value: 2048, source: mine}\n", 1)
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="piecewise_cuda_graph_max_tokens=2048.*DP attention"):
        resolve(str(path), "gpu")


@pytest.mark.parametrize("value", [1, "yes", None])
def test_only_true_or_false(value):
    with pytest.raises(TopologyError, match="piecewise_cuda_graph must be True or False"):
        scenario("h200", model="deepseek-r1", piecewise_cuda_graph=value)


def test_cli_flag(capsys):
    base = ["predict", "--gpu", "h200", "--model", "deepseek-r1", "--system", "gpu", "--context", "1K",
            "--output", "64", "--concurrency", "1", "--json"]
    import json
    assert main(base) == 0
    off = json.loads(capsys.readouterr().out)
    assert main(base + ["--piecewise-cuda-graph"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert on["ttft_mean_ms"] < off["ttft_mean_ms"]
    assert main(base + ["--piecewise-cuda-graph", "--dp", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DP attention" in err[0]


def test_launch_command_states_the_graph():
    off = sglang_command(_r1(False), "gpu")
    on = sglang_command(_r1(True), "gpu")
    assert "--disable-piecewise-cuda-graph" in off and "--piecewise-cuda-graph-max-tokens" not in off
    assert "--piecewise-cuda-graph-max-tokens 2048" in on and "--disable-piecewise-cuda-graph" not in on
    assert "piecewise" not in sglang_command("sac-testbed", "cxl")       # DP attention: SGLang never graphs it


HEADER = ("id,group,gpu,gpus,model,weights,kv_dtype,tp,dp,ep,mem_fraction,chunked_prefill,scheduler_recv_interval,"
          "piecewise_cuda_graph,isl,osl,range_ratio,concurrency,requests,ttft_mean_ms,tpot_mean_ms,output_tok_s,source\n")


def test_external_column(tmp_path):
    row = "x,g,h200,8,deepseek-r1,fp8,auto,8,1,1,,,,{},1024,1024,0.8,4,40,160,9.7,,here\n"
    p = tmp_path / "runs.csv"
    p.write_text(HEADER + row.format(1) + row.format(0) + row.format(""))
    runs = load_external_runs(p)
    assert [r.piecewise_cuda_graph for r in runs] == [True, False, False]
    assert runs[0].scenario_kwargs()["piecewise_cuda_graph"] is True
    assert "piecewise_cuda_graph" not in runs[1].scenario_kwargs()
    p.write_text(HEADER + row.format("yes"))
    with pytest.raises(DataError, match="piecewise_cuda_graph.*0 or 1"):
        load_external_runs(p)
