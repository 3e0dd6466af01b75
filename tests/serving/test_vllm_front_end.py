"""vLLM's API server as the engine's front end (``engine="vllm"``): the tokenizer thread's batches, the output
handler's time per message and per request, and the engine core taking requests in between its steps.

Read from vllm-project/vllm: ``vllm/utils/async_utils.py`` at 007e04ac (``AsyncMicrobatchTokenizer``: one thread,
a 2 ms batch window, at most 32 prompts), ``vllm/v1/engine/async_llm.py`` at 00080ee1 (``output_handler``),
``vllm/v1/engine/core.py`` at ac3cb2e2 (``run_busy_loop``). The per-message and per-request costs are
vllm-project/vllm#6913's (0.2 ms at batch 1, 3.4 ms at batch 32). Each hand-computed value below differs from
what SGLang's front end gives for the same events."""
import math

import pytest

import sacmodel
from sacmodel.hardware.sizing import VLLM_FRONT_END
from sacmodel.serving.config import VLLM_FRONT_TERMS, resolve
from sacmodel.serving.engine import loop
from sacmodel.serving.engine.frontend import FrontEnd
from sacmodel.serving.engine.loop import open_engine
from sacmodel.serving.engine.vllm_front import VLLMFrontEnd, VLLMServers

MS = 1e-3


def _run(fe, until=math.inf):
    dispatched, delivered = {}, []
    fe.run(until, lambda i, t: dispatched.setdefault(i, t), lambda p, t: delivered.append((p, t)))
    return dispatched, delivered


def test_the_tokenizer_batches_prompts_that_come_within_its_window():
    """Prompts at 0 and 1 ms (3 and 4 ms of tokenizing) form one batch: it starts at the 2 ms window's end and
    both go on at 2 + 3 + 4 = 9 ms. A prompt at 2.5 ms waits for the thread (free at 9 ms), then for its own
    window: 9 + 2 + 1 = 12 ms. SGLang's loop takes each in as it comes: 3, 7 and 8 ms."""
    fe = VLLMFrontEnd(2 * MS, 0.0, 0.0)
    for t, i, w in ((0.0, 0, 3 * MS), (1 * MS, 1, 4 * MS), (2.5 * MS, 2, 1 * MS)):
        fe.arrive(t, i, w)
    d, _ = _run(fe)
    assert d == pytest.approx({0: 9 * MS, 1: 9 * MS, 2: 12 * MS})
    sg = FrontEnd()
    for t, i, w in ((0.0, 0, 3 * MS), (1 * MS, 1, 4 * MS), (2.5 * MS, 2, 1 * MS)):
        sg.arrive(t, i, w)
    assert _run(sg)[0] == pytest.approx({0: 3 * MS, 1: 7 * MS, 2: 8 * MS})


def test_a_full_batch_does_not_wait_for_the_window():
    """32 prompts queued by 0.5 ms: the batch starts with the 32nd (max_batch_size), not at the 2 ms window."""
    fe = VLLMFrontEnd(2 * MS, 0.0, 0.0)
    for i in range(33):
        fe.arrive(i * 0.5 * MS / 32, i, 0.1 * MS)
    d, _ = _run(fe)
    assert d[0] == pytest.approx(31 * 0.5 * MS / 32 + 32 * 0.1 * MS)
    assert d[32] == pytest.approx(d[0] + 2 * MS + 0.1 * MS)      # the 33rd opens the next batch's window


def test_tokenizing_does_not_hold_up_the_outputs():
    """A 100 ms prompt being tokenized from 0 and a first token produced at 1 ms: vLLM's event loop hands the
    token on at 1 ms + one message (0.097 ms) + one request (0.103 ms); SGLang's loop, busy with the intake,
    hands it on after it, at 100 ms."""
    msg, req = VLLM_FRONT_END["vllm_output_message"][0], VLLM_FRONT_END["vllm_output_request"][0]
    fe = VLLMFrontEnd(0.0, msg, req)
    fe.arrive(0.0, 0, 100 * MS)
    fe.produce(1 * MS, 1, [(7, False)], requests=1)
    _, got = _run(fe)
    assert got == [([(7, False)], pytest.approx(1 * MS + msg + req))]
    sg = FrontEnd()
    sg.arrive(0.0, 0, 100 * MS)
    sg.produce(1 * MS, 1, [(7, False)])
    assert _run(sg)[1][0][1] == pytest.approx(100 * MS)


def test_outputs_fall_behind_when_a_steps_outputs_take_longer_than_the_step():
    """0.1 ms a message, 0.1 ms a request. Ten steps from 0 to 10 ms with 50 requests each: the first message
    comes at 1 ms (the end of the first step) and 10 x (0.1 + 5) = 51 ms of work follows, so the next first
    token (produced at 10 ms) is handed on at 1 + 51 + 0.2 ms. With 5 requests a step (6 ms of work) the loop
    keeps up: 10 + 0.2 ms."""
    for per_step, want in ((50, 52.2 * MS), (5, 10.2 * MS)):
        fe = VLLMFrontEnd(0.0, 0.1 * MS, 0.1 * MS)
        fe.produce(10 * MS, 10, requests=10 * per_step, since=0.0)
        fe.produce(10 * MS, 1, [(3, False)], requests=1)
        assert _run(fe)[1][0][1] == pytest.approx(want)


def test_a_vllm_machine_carries_its_front_end_terms_with_sources():
    t = sacmodel.scenario("h100", gpus=2, model="qwen3-32b", weights="bf16", engine="vllm")
    for name, (value, raw, source) in VLLM_FRONT_END.items():
        p = t.serving[name]
        assert (p.value, p.raw) == (pytest.approx(value), raw) and "vllm" in p.source.lower()
    assert "vllm_tokenizer_wait" not in sacmodel.scenario("h100", gpus=2, model="qwen3-32b", weights="bf16").serving


def _lone_ttft(monkeypatch, terms, prompt=2000):
    monkeypatch.setattr(loop, "vllm_front_end", lambda topo: terms)
    cfg = resolve(sacmodel.scenario("h100", gpus=2, model="qwen3-32b", weights="bf16", engine="vllm"), "gpu")
    eng = open_engine(cfg, max_output=4)
    eng.submit(0.0, prompt, 4)
    while eng.due() < math.inf:
        eng.step()
    r = eng.result()
    return float(r.first[0] - r.release[0])


def test_each_front_end_term_adds_itself_to_a_lone_requests_ttft(monkeypatch):
    """A lone request: the tokenizer's window, one message and one request of output processing each add
    exactly their value to its TTFT (the engine core admits it at once: it is idle)."""
    base = _lone_ttft(monkeypatch, (0.0, 0.0, 0.0))
    assert _lone_ttft(monkeypatch, (2 * MS, 0.0, 0.0)) - base == pytest.approx(2 * MS, abs=1e-9)
    assert _lone_ttft(monkeypatch, (0.0, 0.3 * MS, 0.0)) - base == pytest.approx(0.3 * MS, abs=1e-9)
    assert _lone_ttft(monkeypatch, (0.0, 0.0, 0.5 * MS)) - base == pytest.approx(0.5 * MS, abs=1e-9)


def test_the_engine_core_takes_a_request_in_between_its_steps(monkeypatch):
    """A request reaching a busy vLLM engine core mid-step is scheduled in the next step, which starts when
    the running one ends (run_busy_loop drains its input queue before each step); SGLang's overlap loop has
    already taken requests in for that step when it launched it, so the request waits one step more. (The API
    server's intake is set to nothing here: the request reaches the engine core as it reaches the server.)"""
    terms = tuple(VLLM_FRONT_END[n][0] for n in VLLM_FRONT_TERMS)
    monkeypatch.setattr(loop, "vllm_front_end", lambda topo: terms[:3] + (0.0,) + terms[4:])
    waits = {}
    for engine in ("vllm", "sglang"):
        cfg = resolve(sacmodel.scenario("h100", gpus=2, model="qwen3-32b", weights="bf16", engine=engine), "gpu")
        eng = open_engine(cfg, max_output=400)
        eng.submit(0.0, 100, 400)
        while eng.ranks.running[0] < 1:
            eng.step()
        for _ in range(5):
            eng.step()
        t0 = eng.t
        eng.submit(t0 + 1e-6, 100, 2)
        starts = []
        while eng.ranks.prefilled[1] < 100:
            starts.append(eng.t)
            eng.step()
        waits[engine] = starts[-1] - t0
    assert waits["vllm"] < 0.75 * waits["sglang"]          # one decode step against two


def test_a_burst_leaves_the_event_loop_together_and_holds_up_the_outputs():
    """vLLM's chat path takes each request in on the API server's event loop (serving_chat.py at 003fe593), the
    loop the outputs also need. 40 requests at 0 with 10 ms of intake each: one pass of 400 ms, after which all
    40 go to the tokenizer (0.05 ms each): a full batch of 32 at once, done at 401.6 ms; the last 8 wait for the
    2 ms window: 403.6 + 0.4 = 404.0 ms. A first token produced at 5 ms waits for that pass: 400 + 0.1 (message)
    + 0.1 (request) = 400.2 ms. A request coming at 100 ms (after the token) is taken in in the next pass, after
    the token: 400.2 + 10 = 410.2 ms, then its own 2 ms window and 0.05 ms: 412.25 ms."""
    fe = VLLMFrontEnd(2 * MS, 0.1 * MS, 0.1 * MS, intake=10 * MS)
    for i in range(40):
        fe.arrive(0.0, i, 0.05 * MS)
    fe.produce(5 * MS, 1, [(99, False)], requests=1)
    fe.arrive(100 * MS, 40, 0.05 * MS)
    d, got = _run(fe)
    assert [d[i] for i in (0, 31, 32, 39, 40)] == pytest.approx([401.6 * MS, 401.6 * MS, 404.0 * MS, 404.0 * MS,
                                                                 412.25 * MS])
    assert got == [([(99, False)], pytest.approx(400.2 * MS))]


def test_a_message_produced_before_a_request_came_goes_first_in_the_pass():
    """First come, first served within a pass: a token produced at 1 ms and a request at 2 ms, both waiting for a
    pass that starts at 10 ms (a first request at 0 with 10 ms of intake): the token goes out at 10 + 0.3 ms,
    before the second request's 10 ms; produced at 3 ms, after the request came, it waits for it: 20 + 0.3 ms.
    The request leaves at the pass's end, 20.3 ms, in both."""
    for produced, want in ((1 * MS, 10.3 * MS), (3 * MS, 20.3 * MS)):
        fe = VLLMFrontEnd(0.0, 0.3 * MS, 0.0, intake=10 * MS)
        fe.arrive(0.0, 0, 0.0)
        fe.arrive(2 * MS, 1, 0.0)
        fe.produce(produced, 1, [(7, False)], requests=1)
        d, got = _run(fe)
        assert got[0][1] == pytest.approx(want)
        assert d[1] == pytest.approx(20.3 * MS)           # the pass's requests leave at its end either way


def _burst_ttfts(monkeypatch, intake, n=50):
    terms = tuple(VLLM_FRONT_END[k][0] for k in VLLM_FRONT_TERMS)
    monkeypatch.setattr(loop, "vllm_front_end", lambda topo: terms[:3] + (intake,) + terms[4:])
    cfg = resolve(sacmodel.scenario("h100", gpus=1, model="qwen3-14b", weights="bf16", engine="vllm"), "gpu")
    eng = open_engine(cfg, max_output=4)
    for _ in range(n):
        eng.submit(0.0, 128, 4)
    while eng.due() < math.inf:
        eng.step()
    r = eng.result()
    return [float(r.first[i] - r.release[i]) for i in range(n)]


def test_a_bursts_first_tokens_wait_for_the_whole_bursts_intake(monkeypatch):
    """A law of the pass: n requests sent at once leave the event loop together, so every TTFT of the burst is at
    least n x vllm_intake_request, and 1 ms more intake per request delays every one of them by n ms (the engine
    core is idle until the pass ends, so all that follows moves by as much)."""
    n = 50
    base, more = _burst_ttfts(monkeypatch, 4 * MS, n), _burst_ttfts(monkeypatch, 5 * MS, n)
    assert min(base) >= n * 4 * MS
    assert [b - a for a, b in zip(base, more)] == pytest.approx([n * MS] * n, abs=1e-9)


def test_api_servers_split_a_burst_and_each_takes_its_share_in():
    """--api-server-count 2: request i goes to server i mod 2, each with its own event loop and tokenizer thread.
    40 requests at 0 with 10 ms of intake each: two passes of 20 x 10 = 200 ms side by side; each tokenizer then
    waits its 2 ms window for its 20 prompts (fewer than 32) and takes 20 x 0.05 ms: all go on at 203.0 ms (one
    server: 401.6 and 404.0 ms). Request 7's first token, produced at 5 ms, waits for its own server's pass:
    200 + 0.1 + 0.1 ms."""
    fe = VLLMServers(2, 2 * MS, 0.1 * MS, 0.1 * MS, 10 * MS)
    for i in range(40):
        fe.arrive(0.0, i, 0.05 * MS)
    fe.produce(5 * MS, 1, [(7, False)], requests=1)
    d, got = _run(fe)
    assert sorted(set(round(v / MS, 9) for v in d.values())) == pytest.approx([203.0])
    assert got == [([(7, False)], pytest.approx(200.2 * MS))]
    assert not fe.busy() and fe.payloads == 0


def _ttfts(monkeypatch, servers, n, intake=4 * MS, prompt=16):
    terms = tuple(VLLM_FRONT_END[k][0] for k in VLLM_FRONT_TERMS)
    monkeypatch.setattr(loop, "vllm_front_end", lambda topo: terms[:3] + (intake,) + terms[4:])
    monkeypatch.setattr(loop, "vllm_api_servers", lambda topo: servers)
    cfg = resolve(sacmodel.scenario("h100", gpus=1, model="qwen3-14b", weights="bf16", engine="vllm"), "gpu")
    eng = open_engine(cfg, max_output=4)
    for _ in range(n):
        eng.submit(0.0, prompt, 4)
    while eng.due() < math.inf:
        eng.step()
    r = eng.result()
    return [float(r.first[i] - r.release[i]) for i in range(n)]


def test_more_api_servers_leave_a_lone_request_alone_and_shorten_a_bursts_intake(monkeypatch):
    """Laws of --api-server-count k: a lone request meets one event loop whatever k is (same TTFT). A burst of 32
    short prompts: one server takes them in in one pass of 32 x 4 ms and tokenizes them in one full batch; four
    take 8 each (8 x 4 ms) and each waits its tokenizer's 2 ms window. The engine core gets the same 32 at once
    either way and returns their first tokens in one step; each server then processes its own 8 of them, where
    one server processes all 32. So every first token comes 24 x 4 - 2 + 24 x (vllm_output_request +
    vllm_stream_chunk) ms sooner with four, up to the tokenizing itself (24 prompts of 16 tokens, 0.2 ms)."""
    assert _ttfts(monkeypatch, 4, 1) == pytest.approx(_ttfts(monkeypatch, 1, 1), abs=1e-12)
    one, four = _ttfts(monkeypatch, 1, 32), _ttfts(monkeypatch, 4, 32)
    per_output = VLLM_FRONT_END["vllm_output_request"][0] + VLLM_FRONT_END["vllm_stream_chunk"][0]
    want = 24 * 4 * MS - 2 * MS + 24 * per_output
    assert [a - b for a, b in zip(one, four)] == pytest.approx([want] * 32, abs=0.3 * MS)
    sizing = sacmodel.scenario("h100", gpus=1, model="qwen3-14b", weights="bf16", engine="vllm").serving
    assert sizing["vllm_api_servers"].value == 1       # vllm serve's default: one API server
