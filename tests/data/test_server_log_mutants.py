"""The server-log parser field by field, on a synthetic log whose every number is distinct (so that a field read
into the wrong column, a rank read from the TP index, or a time off by one interval is visible)."""
import os

import pytest

from sacmodel.data.records import DataError
from sacmodel.data.server_logs import MAX_RANK, _parse_value, load_server_log, parse_server_args

# a DP-attention server with tp = 8, dp = 2: the prefix names the DP group and the TP rank, DP1 runs TP4..TP7
LOG = """\
[2026-04-21 10:00:00] WARNING server_args.py:1438: Setting page size to 64.
[2026-04-21 10:00:01] server_args=ServerArgs(model_path='/m', dp_size=2, tp_size=8, chunked_prefill_size=1024)
[2026-04-21 10:00:02] server_args=ServerArgs(model_path='/other', dp_size=7)
[2026-04-21 10:00:05 DP1 TP4] Prefill batch, #new-seq: 3, #new-token: 192, #cached-token: 65408, token usage: 0.25, #running-req: 5, #queue-req: 7, cuda graph: False, input throughput (token/s): 9.00
[2026-04-21 10:00:06] INFO:     127.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 200 OK
[2026-04-21 10:00:08] INFO:     127.0.0.1:2 - "POST /v1/completions HTTP/1.1" 200 OK
[2026-04-21 10:00:08] INFO:     127.0.0.1:3 - "GET /health HTTP/1.1" 200 OK
[2026-04-21 10:00:10 DP1 TP4] Decode batch, #running-req: 4, #token: 40960, token usage: 0.33, cuda graph: True, gen throughput (token/s): 80.00, #queue-req: 2
[2026-04-21 10:00:12 DP1 TP4] Decode batch, #running-req: 4, #token: 41120, token usage: 0.34, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 1
[2026-04-21 10:00:13 DP0 TP0] Decode batch, #running-req: 2, #token: 9000, token usage: 0.11, cuda graph: True, gen throughput (token/s): 25.00, #queue-req: 0
[2026-04-21 10:00:15 DP0 TP0] Decode batch, #running-req: 2, #token: 9080, token usage: 0.12, cuda graph: True, gen throughput (token/s): 40.00, #queue-req: 0
[2026-04-21 10:00:16 DP1 TP4] Decode batch, #running-req: 3, #token: 30000, token usage: 0.30, cuda graph: True, gen throughput (token/s): 60.00, #queue-req: 0
[2026-04-21 10:00:17 DP0 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 1, token usage: 0.13, #running-req: 2, #queue-req: 0, cuda graph: False, input throughput (token/s): 1.00
[2026-04-21 10:00:17 DP0 TP0] Decode batch, #running-req: 2, #token: 9300, token usage: 0.13, cuda graph: True, gen throughput (token/s): 50.00, #queue-req: 0
[2026-04-21 10:00:19 DP1 TP4] Decode batch, #running-req: 3, #token: 30100, token usage: 0.31, cuda graph: True, gen throughput (token/s): 0.00, #queue-req: 0
[2026-04-21 10:00:20] INFO:     127.0.0.1:4 - "POST /v1/completions HTTP/1.1" 200 OK
[2026-04-21 10:00:21 DP1 TP4] Scheduler hit an exception: Traceback (most recent call last):
  File "x.py", line 1, in f
RuntimeError: alloc failed (alloc_size=6208)
[2026-04-21 10:00:22 DP0 TP0] Scheduler hit an exception: Traceback (most recent call last):
"""


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "server.log"
    p.write_text(LOG)
    return load_server_log(p)


def test_every_prefill_and_decode_field_lands_in_its_column(log):
    p = log.prefill[0]
    assert (p["t"], p["rank"]) == (5.0, 1)              # seconds since the first stamp (the warning); DP, not TP
    assert [p[f] for f in ("new_seq", "new_tokens", "cached_tokens", "usage", "running", "queued")] == \
        [3, 192, 65408, 0.25, 5, 7]
    d = log.decode[0]
    assert (d["t"], d["rank"]) == (10.0, 1)
    assert [d[f] for f in ("running", "tokens", "usage", "gen_tps", "queued")] == [4, 40960, 0.33, 80.0, 2]
    assert log.decode["rank"].tolist() == [1, 1, 0, 0, 1, 0, 1]
    assert log.prefill["t"].tolist() == [5.0, 17.0] and log.prefill["cached_tokens"].tolist() == [65408, 1]


def test_settings_come_from_the_first_server_args_line_and_give_the_ranks(log):
    assert log.settings == {"model_path": "/m", "dp_size": 2, "tp_size": 8, "chunked_prefill_size": 1024}
    assert log.ranks == 2
    assert log.notes == ["Setting page size to 64."]


def test_ranks_without_dp_size_are_the_highest_rank_seen_plus_one(tmp_path):
    p = tmp_path / "nodp.log"
    p.write_text("\n".join(line for line in LOG.splitlines() if "server_args" not in line) + "\n")
    assert load_server_log(p).ranks == 2                 # DP0 and DP1 (not TP4: 5)
    q = tmp_path / "prefill_only.log"
    q.write_text(LOG.splitlines()[3] + "\n")
    assert load_server_log(q).ranks == 2                 # one prefill line on DP1, no decode line


def test_arrivals_are_the_generation_posts_only(log):
    assert log.arrivals.tolist() == [6.0, 8.0, 20.0]


def test_exceptions_carry_time_rank_and_message_or_a_placeholder(log):
    assert log.exceptions == [(21.0, 1, "RuntimeError: alloc failed (alloc_size=6208)"),
                              (22.0, 0, "scheduler exception (message not found)")]
    assert log.rank(1).exceptions == [log.exceptions[0]] and log.rank(0).exceptions == [log.exceptions[1]]


def test_window_is_half_open_and_cuts_every_kind_of_event(log):
    w = log.window(8.0, 17.0)
    assert w.arrivals.tolist() == [8.0]
    assert w.decode["t"].tolist() == [10.0, 12.0, 13.0, 15.0, 16.0]
    assert w.prefill.size == 0 and w.exceptions == []
    assert log.window(17.0).prefill["t"].tolist() == [17.0]
    assert [e[0] for e in log.window(21.0, 22.0).exceptions] == [21.0]
    assert log.window(0.0).settings is log.settings


def test_rounds_split_at_the_first_request_after_the_first_round(log):
    assert log.round_start(1) == 8.0 and log.round_start(2) == 20.0
    r1, r2 = log.rounds(first_round_requests=1)
    assert r1.arrivals.tolist() == [6.0] and r2.arrivals.tolist() == [8.0, 20.0]
    assert r1.prefill.size == 0                            # the prefill at t = 5 is before the first request
    assert r1.decode.size == 0 and r2.decode.size == 7
    with pytest.raises(DataError, match="3 requests logged, no second round after 3"):
        log.round_start(3)


def test_rank_view_keeps_that_ranks_batches(log):
    r0 = log.rank(0)
    assert r0.decode["tokens"].tolist() == [9000, 9080, 9300] and r0.prefill["new_tokens"].tolist() == [64]
    assert r0.arrivals.tolist() == log.arrivals.tolist()


def test_step_times_by_hand(log):
    """Rank 1: 10 -> 12 s at 4 requests and 100 tok/s: 40 ms a step; 12 -> 16 s the running count changes; 16 ->
    19 s gen_tps 0. Rank 0: 13 -> 15 s at 2 requests, 40 tok/s: 50 ms; 15 -> 17 s a prefill at 17 s (the interval's
    end counts)."""
    st = log.step_times()
    assert [(r["t"], r["rank"], r["running"], r["tokens"]) for r in st] == [(15.0, 0, 2, 9080), (12.0, 1, 4, 41120)]
    assert st["step_s"].tolist() == pytest.approx([2 / 40.0, 4 / 100.0], rel=1e-15)


def test_a_prefill_at_the_start_of_an_interval_drops_it(tmp_path):
    p = tmp_path / "start.log"
    p.write_text(
        "[2026-04-21 10:00:00 DP0 TP0] Decode batch, #running-req: 2, #token: 10, token usage: 0.1, gen throughput "
        "(token/s): 20.00, #queue-req: 0\n"
        "[2026-04-21 10:00:00 DP0 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, token usage: "
        "0.1, #running-req: 2, #queue-req: 0\n"
        "[2026-04-21 10:00:03 DP0 TP0] Decode batch, #running-req: 2, #token: 12, token usage: 0.1, gen throughput "
        "(token/s): 20.00, #queue-req: 0\n"
        "[2026-04-21 10:00:05 DP0 TP0] Decode batch, #running-req: 2, #token: 14, token usage: 0.1, gen throughput "
        "(token/s): 20.00, #queue-req: 0\n")
    st = load_server_log(p).step_times()
    assert st["t"].tolist() == [5.0] and st["step_s"].tolist() == [0.1]


def test_parsed_arrays_are_read_only_and_a_log_is_parsed_once_per_version(tmp_path):
    p = tmp_path / "server.log"
    p.write_text(LOG)
    a = load_server_log(p)
    assert load_server_log(p) is a
    for arr in (a.prefill, a.decode, a.arrivals):
        with pytest.raises(ValueError):
            arr[:1] = arr[:1]
    p.write_text(LOG.replace("#new-token: 192", "#new-token: 193"))
    os.utime(p, ns=(10**18, 10**18))                      # a new version, whatever the clock's resolution
    b = load_server_log(p)
    assert b is not a and b.prefill["new_tokens"][0] == 193


def test_ranks_up_to_the_limit_are_accepted(tmp_path):
    line = ("[2026-04-21 10:00:00 DP{} TP0] Decode batch, #running-req: 1, #token: 1, token usage: 0.1, gen "
            "throughput (token/s): 1.00, #queue-req: 0\n")
    p = tmp_path / "edge.log"
    p.write_text(line.format(MAX_RANK))
    assert load_server_log(p).decode["rank"].tolist() == [MAX_RANK]
    q = tmp_path / "over.log"
    q.write_text(line.format(MAX_RANK + 1))
    with pytest.raises(DataError, match="line 1: data-parallel rank DP65537 is above 65536"):
        load_server_log(q)


@pytest.mark.parametrize("field,line", [
    ("new_seq", "Prefill batch, #new-seq: -1, #new-token: 1, #cached-token: 0, token usage: 0.1, #running-req: 0, "
                "#queue-req: 0"),
    ("queued", "Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.1, #running-req: 0, "
               "#queue-req: -2"),
    ("tokens", "Decode batch, #running-req: 1, #token: -5, token usage: 0.1, gen throughput (token/s): 1, "
               "#queue-req: 0"),
])
def test_negative_counts_are_refused_by_name(tmp_path, field, line):
    p = tmp_path / "neg.log"
    p.write_text(f"[2026-04-21 10:00:00 DP0 TP0] {line}\n")
    with pytest.raises(DataError, match=f"negative {field} in a batch line"):
        load_server_log(p)


def test_a_negative_usage_or_rate_is_refused(tmp_path):
    """Usage is a fraction of the pool and gen_tps a throughput: neither is negative (issue 36)."""
    p = tmp_path / "ratio.log"
    p.write_text("[2026-04-21 10:00:00 DP0 TP0] Decode batch, #running-req: 1, #token: 5, token usage: -0.1, gen "
                 "throughput (token/s): -1, #queue-req: 0\n")
    with pytest.raises(DataError, match="line 1: token usage -0.1 is not a fraction"):
        load_server_log(p)


def test_a_prefill_line_without_a_field_names_it(tmp_path):
    p = tmp_path / "miss.log"
    p.write_text("[2026-04-21 10:00:00 DP0 TP0] Prefill batch, #new-seq: 1, #new-token: 1, token usage: 0.1, "
                 "#running-req: 0, #queue-req: 0\n")
    with pytest.raises(DataError, match="line 1: prefill batch line without cached_tokens$"):
        load_server_log(p)


def test_a_stamp_that_is_no_date_names_the_line(tmp_path):
    p = tmp_path / "date.log"
    p.write_text("[2026-04-21 10:00:00] INFO:     127.0.0.1:1 - \"POST /v1/completions HTTP/1.1\" 200 OK\n"
                 "[2026-13-45 10:00:00] INFO:     127.0.0.1:1 - \"POST /v1/completions HTTP/1.1\" 200 OK\n")
    with pytest.raises(DataError, match=r"line 2: not a date and time: '2026-13-45 10:00:00'"):
        load_server_log(p)


@pytest.mark.parametrize("text,want", [
    ("'abc'", "abc"), ('"x, y"', "x, y"), ("'{\"a\": 1}'", {"a": 1}), ("'[1, 2]'", [1, 2]),
    ("'{not json'", "{not json"), ("True", True), ("False", False), ("None", None), ("7", 7), ("-3", -3),
    ("2.5", 2.5), ("1e3", 1000.0), ("raw_text", "raw_text"), ("  12  ", 12), ("'", "'"),
])
def test_setting_values_by_hand(text, want):
    got = _parse_value(text)
    assert got == want and type(got) is type(want)


def test_server_args_split_at_top_level_commas_only():
    line = ("x server_args=ServerArgs(a='p,q=r', b=(1, 2), c={'k': [3, 4]}, d=\"it's\", e=5, f=None)  ")
    assert parse_server_args(line) == {"a": "p,q=r", "b": "(1, 2)", "c": "{'k': [3, 4]}", "d": "it's", "e": 5,
                                       "f": None}
    assert parse_server_args("no settings here") == {}
    assert parse_server_args("server_args=ServerArgs()") == {}


def test_arrival_and_prefill_times_share_one_clock(tmp_path):
    """t0 is the first stamp of any kind, so a request logged 3 s after the first batch line is at t = 3."""
    p = tmp_path / "clock.log"
    p.write_text("[2026-04-21 23:59:59 DP0 TP0] Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, "
                 "token usage: 0.1, #running-req: 0, #queue-req: 0\n"
                 "[2026-04-22 00:00:02] INFO:     127.0.0.1:1 - \"POST /v1/completions HTTP/1.1\" 200 OK\n")
    log = load_server_log(p)
    assert log.prefill["t"].tolist() == [0.0] and log.arrivals.tolist() == [3.0]


def test_server_args_at_the_start_of_a_line():
    assert parse_server_args("ServerArgs(a=1, b='x')") == {"a": 1, "b": "x"}


def test_a_hostile_rank_is_echoed_at_most_20_digits(tmp_path):
    p = tmp_path / "rank.log"
    p.write_text("[2026-04-21 10:00:00 DP" + "9" * 25 + " TP0] Decode batch, #running-req: 1, #token: 1, token usage: "
                 "0.1, gen throughput (token/s): 1.00, #queue-req: 0\n")
    with pytest.raises(DataError, match=r"rank DP9{20} is above"):
        load_server_log(p)


def test_dp_size_of_the_settings_counts_ranks_that_never_logged(tmp_path):
    p = tmp_path / "idle.log"
    p.write_text("[2026-04-21 10:00:00] server_args=ServerArgs(dp_size=4)\n"
                 "[2026-04-21 10:00:01 DP0 TP0] Decode batch, #running-req: 1, #token: 1, token usage: 0.1, gen "
                 "throughput (token/s): 1.00, #queue-req: 0\n")
    assert load_server_log(p).ranks == 4
