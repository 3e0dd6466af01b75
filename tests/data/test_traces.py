import json

import numpy as np
import pytest
from measured_data import SHARED

from sacmodel.cli import main
from sacmodel.data.records import DataError
from sacmodel.data.traces import load_trace, summarize
from sacmodel.serving.replay import replay


def write_mooncake(tmp_path, rows):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def test_mooncake_prefix_hits_and_summary(tmp_path):
    p = write_mooncake(tmp_path, [
        {"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [1, 2, 3]},
        {"timestamp": 500, "input_length": 2000, "output_length": 20, "hash_ids": [1, 2, 9, 10]},
        {"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [7, 1]},
    ])
    t = load_trace(p)
    assert list(t.cached) == [0, 2 * 512, 0] and list(t.arrival) == [0.0, 0.5, 1.0]
    s = summarize(t)
    assert s["requests"] == 3 and s["rate_req_s"] == pytest.approx(2.0)
    assert s["cached_token_ratio"] == pytest.approx(1024 / 4100)


@pytest.mark.parametrize("line,msg", [("{not json", "not valid JSON"), ('{"timestamp": 1}', "missing field"),
                                      ('{"timestamp": 1, "input_length": -4, "output_length": 2}', "input_length")])
def test_broken_trace_line_is_named(tmp_path, line, msg):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": []}\n' + line + "\n")
    with pytest.raises(DataError, match=rf"bad.jsonl:2: .*{msg}"):
        load_trace(p)


def test_azure_csv_and_cli_errors(tmp_path, capsys):
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.0,x,1\n")
    with pytest.raises(DataError, match="a.csv:4"):
        load_trace(p)
    assert main(["replay", str(p)]) == 2 and "a.csv:4" in capsys.readouterr().err
    t = load_trace(p, limit=2)
    assert not t.has_prefix_info and t.arrival[1] == pytest.approx(4.3145790)
    with pytest.raises(DataError, match="no prefix information"):
        replay("sac-testbed", "cxl", t, cache="trace")


def test_replay_heterogeneous_requests(tmp_path):
    rng = np.random.default_rng(3)
    rows = [{"timestamp": int(i * 2000), "input_length": int(rng.integers(3000, 60000)),
             "output_length": int(rng.integers(10, 200)), "hash_ids": [0, 1, 2, 3, 4, 5]} for i in range(40)]
    t = load_trace(write_mooncake(tmp_path, rows))
    cached = replay("sac-testbed", "cxl", t, concurrency=16)
    cold = replay("sac-testbed", "cxl", t, concurrency=16, cache="none")
    slower = replay("sac-testbed", "cxl", t, concurrency=16, time_scale=0.25)   # arrivals 4x further apart
    assert cached.feasible and cached.requests == 40
    assert cold.ttft_mean_ms > cached.ttft_mean_ms        # prefilling 3K more tokens per request costs time
    assert slower.ttft_mean_ms <= cached.ttft_mean_ms * 1.001
    shares = [v for k, v in cached.breakdown.items() if k.startswith("share_time")]
    assert shares and all(0 <= v <= 1 for v in shares) and sum(shares) <= 1 + 1e-9


@pytest.mark.skipif(not (SHARED / "traces").is_dir(), reason="needs ../shared/data/traces")
def test_public_traces_match_their_documented_statistics():
    s = summarize(load_trace(SHARED / "traces" / "mooncake_conversation_trace.jsonl"))
    assert s["requests"] == 12031 and s["rate_req_s"] == pytest.approx(3.40, abs=0.01)
    assert s["share_input_above_topk"] == pytest.approx(0.767, abs=0.001)      # constants.md §6
    assert s["cached_token_ratio"] == pytest.approx(0.374, abs=0.001)
    a = summarize(load_trace(SHARED / "traces" / "azure_llm_2023_code.csv"))
    assert a["requests"] == 8819 and a["input_mean"] == pytest.approx(2048, abs=1)


# issue 36 (Impossible data, Sizes): block ids consistent with lengths, non-negative, memory bounded


def _jsonl(tmp_path, *recs, name="t.jsonl"):
    import json as _json
    p = tmp_path / name
    p.write_text("".join(_json.dumps(r) + "\n" for r in recs))
    return p


def test_more_block_ids_than_the_prompt_has_blocks_is_refused(tmp_path):
    ok = {"timestamp": 0, "input_length": 513, "output_length": 5, "hash_ids": [0, 1]}    # ceil(513/512) = 2
    assert len(load_trace(_jsonl(tmp_path, ok)).blocks) == 2
    bad = {"timestamp": 1, "input_length": 512, "output_length": 5, "hash_ids": list(range(5000))}
    with pytest.raises(DataError, match=r"t.jsonl:2: hash_ids: 5,000 block ids for a 512-token prompt; at most 1"):
        load_trace(_jsonl(tmp_path, ok, bad))


def test_negative_block_ids_are_refused(tmp_path):
    bad = {"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [3, -7]}
    with pytest.raises(DataError, match=r"t.jsonl:1: hash_ids: block id -7 is negative"):
        load_trace(_jsonl(tmp_path, bad))


def test_lines_with_and_without_hash_ids_are_refused_none_at_all_has_no_prefix_info(tmp_path):
    a = {"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [0, 1]}
    b = {"timestamp": 1, "input_length": 1024, "output_length": 5}
    with pytest.raises(DataError, match=r"t.jsonl:2: no hash_ids, but line 1 has them"):
        load_trace(_jsonl(tmp_path, a, b))
    tr = load_trace(_jsonl(tmp_path, b, {**b, "timestamp": 2}, name="none.jsonl"))
    assert not tr.has_prefix_info and tr.blocks is None and tr.cached.tolist() == [0, 0]


def test_a_block_id_of_2_to_the_30_does_not_allocate_a_gigabyte(tmp_path):
    import tracemalloc
    recs = [{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [2 ** 30 - 1, 2 ** 30]},
            {"timestamp": 1, "input_length": 1024, "output_length": 5, "hash_ids": [2 ** 30 - 1, 5]}]
    p = _jsonl(tmp_path, *recs)
    tracemalloc.start()
    tr = load_trace(p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20
    assert tr.cached.tolist() == [0, 512]          # the second prompt's first block was seen: one block hit
