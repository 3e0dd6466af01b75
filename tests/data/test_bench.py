"""Readers of SGLang bench_serving and vLLM bench serve result files: fields, per-request arrays, the server log's
launch arguments, and hostile files (one line naming file, line and field)."""
import json
import math

import numpy as np
import pytest

from sacmodel.data.bench import load_bench_file, looks_like_bench, machine_from_server_log, same_model
from sacmodel.data.records import DataError

SGL = {"backend": "sglang", "dataset_name": "random", "request_rate": math.inf, "max_concurrency": 16,
       "random_input_len": 2048, "random_output_len": 512, "random_range_ratio": 0.5, "duration": 80.0,
       "completed": 160, "total_input_tokens": 245760, "total_output_tokens": 61440, "request_throughput": 2.0,
       "output_throughput": 768.0, "mean_ttft_ms": 310.0, "mean_tpot_ms": 18.5, "mean_itl_ms": 18.4}


def jsonl(path, *objs):
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))      # json.dumps writes inf as Infinity
    return path


def test_sglang_jsonl_one_run_per_line_with_summary_means(tmp_path):
    p = jsonl(tmp_path / "r.jsonl", SGL, {**SGL, "max_concurrency": 64, "request_rate": 4.0, "mean_tpot_ms": 30.0})
    assert "Infinity" in p.read_text() and looks_like_bench(p)
    a, b = load_bench_file(p)
    assert (a.harness, a.isl, a.osl, a.range_ratio, a.concurrency, a.requests) == (
        "sglang bench_serving", 2048, 512, 0.5, 16, 160)
    assert math.isinf(a.request_rate) and b.request_rate == 4.0 and b.concurrency == 64
    assert (a.ttft_mean_ms, a.tpot_mean_ms, a.output_tok_s, a.per_request) == (310.0, 18.5, 768.0, False)
    assert a.source.endswith("r.jsonl:1") and b.source.endswith("r.jsonl:2")


def test_per_request_arrays_give_the_means_and_the_lengths(tmp_path):
    ttfts = [0.2, 0.4, 0.0]                    # the third request failed
    itls = [[0.01, 0.03], [0.02, 0.02, 0.02], []]
    detailed = {**SGL, "max_concurrency": 2, "input_lens": [1000, 3000, 2000], "output_lens": [3, 4, 0],
                "ttfts": ttfts, "itls": itls, "errors": ["", "", "timeout"]}
    (r,) = load_bench_file(jsonl(tmp_path / "d.jsonl", detailed))
    assert r.per_request and r.requests == 3 and r.concurrency == 2
    assert r.ttft_mean_ms == pytest.approx(300.0)        # (200 + 400) / 2: the summary's 310 is not used
    assert r.tpot_mean_ms == pytest.approx(20.0)         # mean over requests of each one's mean ITL
    assert r.isl == 2000 and list(r.input_lens) == [1000, 3000, 2000]


def test_vllm_save_result_json_recognised_by_content(tmp_path):
    v = {"date": "20260101-000000", "endpoint_type": "openai", "backend": "openai",
         "model_id": "deepseek-ai/DeepSeek-R1",
         "tokenizer_id": "deepseek-ai/DeepSeek-R1", "num_prompts": 100, "request_rate": "inf", "burstiness": 1.0,
         "max_concurrency": 10, "duration": 50.0, "completed": 100, "failed": 0, "total_input_tokens": 102400,
         "total_output_tokens": 25600, "request_throughput": 2.0, "output_throughput": 512.0,
         "mean_ttft_ms": 250.0, "mean_tpot_ms": 12.0}
    p = tmp_path / "vllm-infqps-concurrency10-DeepSeek-R1.json"
    p.write_text(json.dumps(v, indent=2))
    (r,) = load_bench_file(p)
    assert (r.harness, r.model, r.isl, r.osl, r.concurrency, r.requests) == (
        "vllm bench serve", "deepseek-ai/DeepSeek-R1", 1024, 256, 10, 100)
    assert same_model(r.model, "deepseek-r1") and not same_model(r.model, "llama-3.1-8b")


def test_a_testbed_run_file_is_not_a_bench_file(tmp_path):
    p = tmp_path / "run.json"
    p.write_text(json.dumps({"config": {"target_input_tokens": 1024}, "round2": {}}))
    assert not looks_like_bench(p) and not looks_like_bench(tmp_path)


@pytest.mark.parametrize("text, msg", [
    (json.dumps(SGL)[:-40], r"t\.jsonl:1: not valid JSON .*truncated"),
    (json.dumps({k: v for k, v in SGL.items() if k != "mean_ttft_ms"}), r"t\.jsonl:1: missing field 'mean_ttft_ms'"),
    (json.dumps({**SGL, "mean_tpot_ms": -3.0}), r"t\.jsonl:1: mean_tpot_ms: "),
    (json.dumps(SGL).replace("18.5", "NaN"), r"t\.jsonl:1: (mean_tpot_ms|not valid JSON).*"),
    (json.dumps({**SGL, "output_throughput": 0}), r"t\.jsonl:1: output_throughput: "),
    (json.dumps({**SGL, "ttfts": [0.1], "itls": [[0.01]], "input_lens": [5], "output_lens": [2, 3]}),
     r"per-request arrays differ in length"),
    (json.dumps({**SGL, "completed": "160"}), r"t\.jsonl:1: completed: "),
    ("[1, 2]", r"t\.jsonl:1: expected a JSON object"),
    (json.dumps({**SGL, "request_rate": -1}), r"t\.jsonl:1: request_rate: Input should be greater than 0, got -1"),
    ("", r"no benchmark runs"),
])
def test_hostile_files_are_one_line_naming_the_field(tmp_path, text, msg):
    p = tmp_path / "t.jsonl"
    p.write_text(text)
    with pytest.raises(DataError, match=msg) as e:
        load_bench_file(p)
    assert "\n" not in str(e.value)


def test_a_run_given_twice_is_refused_naming_both_places(tmp_path):
    """The same record twice (a line appended twice, or one file named twice) was fitted as two runs: a
    leave-one-run-out error of 0.0% that tested the run on itself."""
    from sacmodel.data.bench import load_bench_runs
    p = jsonl(tmp_path / "r.jsonl", SGL, {**SGL, "max_concurrency": 64}, SGL)
    with pytest.raises(DataError, match=r"r\.jsonl:3: the same run as .*r\.jsonl:1 \(every field equal\)"):
        load_bench_runs([p])
    q = jsonl(tmp_path / "q.jsonl", SGL)
    with pytest.raises(DataError, match=r"q\.jsonl:1: named twice; give each run once"):
        load_bench_runs([q, tmp_path / "q.jsonl"])
    assert len(load_bench_runs([q, jsonl(tmp_path / "s.jsonl", {**SGL, "mean_ttft_ms": 311.0})])) == 2


def test_a_100_mb_file_is_refused_by_its_size(tmp_path):
    p = tmp_path / "big.jsonl"
    with open(p, "wb") as f:
        f.write(json.dumps(SGL).encode()[:-1] + b', "pad": "')
        f.seek(100 << 20)
        f.write(b'"}\n')
    assert looks_like_bench(p)                            # recognised from its first MiB
    with pytest.raises(DataError, match=r"big\.jsonl: larger than the 67,108,864-byte limit"):
        load_bench_file(p)


def test_launch_arguments_from_a_server_log(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-R1', "
                   "tp_size=8, dp_size=1, ep_size=1, mem_fraction_static=0.82, chunked_prefill_size=32768, "
                   "kv_cache_dtype='auto', enable_dp_attention=False, max_running_requests=None)\n")
    kw = machine_from_server_log(log)
    assert kw == {"tp": 8, "gpus": 8, "ep": 1, "mem_fraction": 0.82, "chunked_prefill": 32768,
                  "model": "deepseek-r1"}
    # a server that names its FP8 GEMM backend (--fp8-gemm-backend); auto (DeepGEMM where on) adds nothing
    log.write_text("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-R1', "
                   "tp_size=8, fp8_gemm_runner_backend='flashinfer_trtllm')\n")
    assert machine_from_server_log(log)["fp8_gemm_backend"] == "flashinfer_trtllm"
    log.write_text("[2026-01-01 00:00:00] server_args=ServerArgs(tp_size=8, fp8_gemm_runner_backend='auto')\n")
    assert "fp8_gemm_backend" not in machine_from_server_log(log)
    log.write_text("[2026-01-01 00:00:00] nothing here\n")
    with pytest.raises(DataError, match="no 'server_args=ServerArgs"):
        machine_from_server_log(log)


def test_lengths_without_arrays_come_from_totals_when_not_random(tmp_path):
    s = {k: v for k, v in SGL.items() if not k.startswith("random_")}
    (r,) = load_bench_file(jsonl(tmp_path / "s.jsonl", {**s, "dataset_name": "sharegpt"}))
    assert (r.isl, r.osl, r.range_ratio) == (1536, 384, 1.0)
    assert np.isclose(r.output_tok_s, 768.0)
