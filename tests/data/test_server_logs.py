"""The SGLang server-log parser: settings, per-rank batches, rounds, exceptions (synthetic logs + shared data)."""
import gzip

import numpy as np
import pytest

from sacmodel.data.records import DataError
from sacmodel.data.runs import shared_data_dir
from sacmodel.data.server_logs import load_server_log, parse_server_args

LOG = """\
[2026-04-21 19:46:40] server_args=ServerArgs(model_path='/m', kv_cache_dtype='bfloat16', chunked_prefill_size=1024, page_size=64, max_total_tokens=200000, hisparse_config='{"top_k":2048,"device_buffer_size":4096}', dp_size=2, load_balance_method='round_robin', api_key=None, skip=False, ratio=0.85, lst=[1, 2], dct={'a': (1, 2)})
[2026-04-21 19:46:39] WARNING server_args.py:1438: Setting KV cache dtype to bfloat16 for DeepSeek DSA on SM9 device.
[2026-04-21 19:49:52 DP1 TP1] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, cuda graph: False, input throughput (token/s): 0.00
[2026-04-21 19:50:08] INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OK
[2026-04-21 19:50:08] INFO:     127.0.0.1:2 - "POST /generate HTTP/1.1" 200 OK
[2026-04-21 19:50:10 DP0 TP0] Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, cuda graph: False, input throughput (token/s): 3.56
[2026-04-21 19:51:00] INFO:     127.0.0.1:3 - "POST /v1/completions HTTP/1.1" 200 OK
[2026-04-21 19:51:01 DP0 TP0] Prefill batch, #new-seq: 2, #new-token: 128, #cached-token: 65408, token usage: 0.26, #running-req: 0, #queue-req: 0, cuda graph: False, input throughput (token/s): 5.17
[2026-04-21 19:51:05 DP0 TP0] Decode batch, #running-req: 2, #token: 40000, token usage: 0.20, cuda graph: True, gen throughput (token/s): 40.00, #queue-req: 0
[2026-04-21 19:51:07 DP0 TP0] Decode batch, #running-req: 2, #token: 40000, token usage: 0.20, cuda graph: True, gen throughput (token/s): 50.00, #queue-req: 0
[2026-04-21 19:51:09 DP1 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "x.py", line 1, in f
RuntimeError: HiSparse prefix-extend buffer alloc failed for req abc (alloc_size=6208)
"""


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "server.log.gz"
    with gzip.open(p, "wt") as fh:
        fh.write(LOG)
    return load_server_log(p)


def test_settings_are_parsed_without_evaluation():
    s = parse_server_args(LOG.splitlines()[0])
    assert s["kv_cache_dtype"] == "bfloat16" and s["chunked_prefill_size"] == 1024 and s["ratio"] == 0.85
    assert s["hisparse_config"] == {"top_k": 2048, "device_buffer_size": 4096}
    assert s["api_key"] is None and s["skip"] is False
    assert s["lst"] == "[1, 2]" and s["dct"] == "{'a': (1, 2)}"     # nested literals stay text


def test_batches_ranks_rounds_and_exceptions(log):
    assert log.ranks == 2
    assert len(log.prefill) == 3 and len(log.decode) == 2
    assert log.notes == ["Setting KV cache dtype to bfloat16 for DeepSeek DSA on SM9 device."]
    assert len(log.arrivals) == 2                                  # /generate (warm-up) is not a request
    r1, r2 = log.rounds(first_round_requests=1)
    assert len(r1.prefill) == 1 and r1.prefill["new_tokens"][0] == 1024
    assert r2.prefill["cached_tokens"].tolist() == [65408.0]
    assert log.exceptions and log.exceptions[0][1] == 1 and "alloc_size=6208" in log.exceptions[0][2]
    st = r2.step_times()
    # the second decode line: 2 requests at 50 tok/s -> 40 ms per step; the first follows a prefill
    assert st["step_s"].tolist() == [pytest.approx(0.04)]
    assert log.rank(1).decode.size == 0


def test_bad_lines_name_the_file_and_line(tmp_path):
    p = tmp_path / "bad.log"
    p.write_text("[2026-04-21 19:51:05 DP0 TP0] Decode batch, #running-req: x, #token: 4, token usage: 0.2, "
                 "gen throughput (token/s): 1, #queue-req: 0\n")
    with pytest.raises(DataError, match=r"bad\.log: line 1: bad value for '#running-req'"):
        load_server_log(p)
    p.write_text("[2026-04-21 19:51:05 DP0 TP0] Decode batch, #running-req: 1\n")
    with pytest.raises(DataError, match="line 1: decode batch line without tokens"):
        load_server_log(p)
    with pytest.raises(DataError, match="cannot read"):
        load_server_log(tmp_path / "missing.log")


LOGS = shared_data_dir() / "sac-testbed" / "server-logs"


@pytest.mark.skipif(not LOGS.is_dir(), reason="needs ../shared/data/sac-testbed/server-logs")
def test_testbed_logs_hold_what_ran():
    log = load_server_log(LOGS / "high_con_0505-06_dram_ctx64k_conc192_n384.log.gz")
    assert log.settings["max_total_tokens"] == 250000 and log.settings["chunked_prefill_size"] == 1024
    assert log.settings["hisparse_config"]["device_buffer_size"] == 6144
    assert "alloc_size=6208" in log.exceptions[0][2]
    _, r2 = log.rounds(8)
    # device tokens held grow by one buffer (6144 + 64 slots) per request admitted on a rank
    d = r2.decode
    one = d[d["running"] == 25]["tokens"]
    assert np.all(np.diff(np.unique(d["tokens"])) % 64 == 0) and len(one)


@pytest.mark.skipif(not LOGS.is_dir(), reason="needs ../shared/data/sac-testbed/server-logs")
def test_front_end_takes_in_a_wave_at_one_rate_per_prompt_token():
    """The HTTP server logs a released wave at a rate inversely proportional to the prompt length: the serial
    front end the engine models, at about the same time per token in every run (32K to 128K, every pool)."""
    from sacmodel.data.runs import load_runs
    from sacmodel.fit.calibrate import front_end_observations, front_end_per_token
    obs = front_end_observations(load_runs())
    assert len(obs) >= 20 and len({r.context for r, _ in obs}) >= 3
    per_token = np.array([s / r.context for r, s in obs])
    v = front_end_per_token(obs)
    assert 0.2e-6 < v < 2e-6 and np.all(np.abs(per_token / v - 1) < 0.2)


# issue 36 (Impossible data): a server log is checked against what a server can print


def _write(tmp_path, text, name="server.log"):
    p = tmp_path / name
    p.write_text(text)
    return p


DEC = ("[2026-04-21 {t} DP0 TP0] Decode batch, #running-req: {run}, #token: 40000, token usage: {use}, "
       "cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0\n")


@pytest.mark.parametrize("field,kw", [("#running-req", dict(run="99999999999999999999")),
                                      ("#running-req", dict(run="2.5")),
                                      ("token usage", dict(use="7.0")),
                                      ("gen throughput", dict(tps="-40.00"))])
def test_impossible_counts_usage_and_throughput_are_refused_naming_line_and_field(tmp_path, field, kw):
    ok = dict(t="19:51:05", run="2", use="0.20", tps="40.00")
    text = DEC.format(**ok) + DEC.format(**{**ok, "t": "19:51:07", **kw})
    with pytest.raises(DataError, match=rf"line 2: {field}"):
        load_server_log(_write(tmp_path, text))


def test_time_going_back_two_hours_is_refused_a_second_is_not(tmp_path):
    ok = dict(run="2", use="0.20", tps="40.00")
    one_back = DEC.format(t="19:51:05", **ok) + DEC.format(t="19:51:04", **ok)
    assert len(load_server_log(_write(tmp_path, one_back)).decode) == 2     # ranks share the log: a stamp 1 s old
    two_hours = DEC.format(t="19:51:05", **ok) + DEC.format(t="17:51:05", **ok)
    with pytest.raises(DataError, match=r"line 2: time 2026-04-21 17:51:05 is 7,200 s before"):
        load_server_log(_write(tmp_path, two_hours, "jump.log"))
