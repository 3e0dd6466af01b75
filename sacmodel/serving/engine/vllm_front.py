"""vLLM's API server as the engine's front end (``engine="vllm"``), in place of SGLang's TokenizerManager.

Read from vllm-project/vllm (``vllm/utils/async_utils.py`` at 007e04ac, ``vllm/v1/engine/async_llm.py`` at
00080ee1, ``vllm/v1/engine/core.py`` at ac3cb2e2, ``vllm/entrypoints/openai/serving_chat.py`` at 003fe593). Two
serial resources:

- **The event loop.** uvicorn runs the API server on one asyncio loop, and everything but the encode call runs
  on it, first come first served: each request's intake (HTTP body, the pydantic ``ChatCompletionRequest``, the
  chat template rendered synchronously in ``_preprocess_chat``, ``SamplingParams``, ``Processor.process_inputs``
  and the send to the engine core: ``vllm_intake_request``), and the output handler (``AsyncLLM.
  output_handler`` pulls the engine core's outputs, one message per engine step, and runs ``OutputProcessor.
  process_outputs`` over the requests in it: ``vllm_output_message`` per message and ``vllm_output_request``
  per request), each request's stream generator then building and writing its SSE chunk (``vllm_stream_chunk``
  per request output). A first or last token reaches the client when its message has been processed. A burst's
  intake holds up the outputs produced meanwhile (they queue behind the requests that came before them), and
  outputs that take longer than the step fall behind; the engine core, a process of its own, keeps stepping.
- **The tokenizer thread.** ``AsyncMicrobatchTokenizer`` runs every encode call on one thread
  (``ThreadPoolExecutor(max_workers=1)``). Its batcher takes the first prompt the loop has queued once the
  thread is free, waits ``batch_wait_timeout_s`` (``vllm_tokenizer_wait``, 2 ms) or until 32 prompts are
  queued, then tokenizes the batch: ``t_token`` per prompt token, one prompt after another; every request of the
  batch goes on to the engine core when the batch is done. Tokenizing does not hold up the loop.

SGLang has one event loop too (:class:`~sacmodel.serving.engine.frontend.FrontEnd`), which also tokenizes. The
engine core takes requests in between its steps (``run_busy_loop``: ``_process_input_queue``, then
``_process_engine_step``) and returns a step's outputs when the step ends: see :class:`~sacmodel.serving.engine.
loop.Engine` (``recv_at`` and the send delays with ``engine="vllm"``).
"""
from __future__ import annotations

import bisect
import math
from typing import Callable

from ...hardware.sizing import VLLM_TOKENIZER_BATCH
from .frontend import FrontEnd


class VLLMFrontEnd(FrontEnd):
    """vLLM's API server: its event loop (each request's intake, then the output handler's messages, first
    come first served), the tokenizer thread's batches (times in s).

    ``intake`` holds requests waiting for the event loop, ``tokq`` those the loop has handed to the tokenizer
    thread (ready, request, tokenizing work). ``msgs`` blocks are [produced, messages, payload, work (s),
    since (s)]: ``since`` is when the block's first message was produced (a jump of identical decode steps
    produces its messages one a step, the first at ``since``, the last at ``produced``)."""

    PRICES_REQUESTS = True          # its output handler's time per request output

    def __init__(self, tokenizer_wait: float, per_message: float, per_request: float, intake: float = 0.0,
                 stream_chunk: float = 0.0, batch: int = VLLM_TOKENIZER_BATCH):
        super().__init__()
        self.wait, self.per_message, self.batch = tokenizer_wait, per_message, batch
        self.per_request = per_request + stream_chunk     # a request's output: processed, then streamed
        self.intake_work = intake       # the event loop's time to take one request in
        self.tokq: list[tuple[float, int, float]] = []     # (ready, request, tokenizing work), by ready
        self.tok_free = 0.0             # when the tokenizer thread finishes its batch
        self.loop_free = 0.0            # when the event loop finishes its job (an intake or a message)

    def produce(self, t: float, count: int, payload: list | None = None, requests: int = 0,
                since: float | None = None) -> None:
        """``count`` engine-core messages carrying ``requests`` request outputs were produced by ``t``
        (from ``since``); ``payload`` (first or last tokens) rides on the last of them."""
        if count <= 0:
            return
        work = count * self.per_message + requests * self.per_request
        if payload:
            self.msgs.append([t, count, payload, work, t])
            self.payloads += 1
        else:                    # a jump's messages come one a step: the first at the end of its first step
            since = t if since is None else min(since, t)
            self.msgs.append([t, count, None, work, since + (t - since) / count])

    def busy(self) -> bool:
        return bool(self.intake or self.tokq) or self.payloads > 0

    def _batch(self) -> tuple[float, int]:
        """The tokenizer's next batch: (when it starts tokenizing, how many queued prompts it takes)."""
        tokq = self.tokq
        first = max(self.tok_free, tokq[0][0])
        k = bisect.bisect_right(tokq, (first + self.wait, math.inf, math.inf))
        if k >= self.batch:
            return max(first, tokq[self.batch - 1][0]), self.batch
        return first + self.wait, k

    def _next_loop(self) -> float:
        """When the event loop starts its next pass (inf: nothing queued)."""
        ready = min(self.intake[0][0] if self.intake else math.inf, self.msgs[0][4] if self.msgs else math.inf)
        return max(self.loop_free, ready)

    def _split(self, blk: list, t: float) -> None:
        """Split a jump's block, its messages produced evenly from ``since`` (the first) to ``produced`` (the
        last), at ``t``: the messages produced by ``t`` (their share of the work) come first, the rest, with the
        payload, after."""
        first, last, count = blk[4], blk[0], blk[1]
        gap = (last - first) / (count - 1)
        k = int((t - first) / gap) + 1
        if k >= count:
            return
        work = blk[3] * k / count
        self.msgs.appendleft([first + (k - 1) * gap, k, None, work, first])
        blk[1] -= k
        blk[3] -= work
        blk[4] = first + k * gap

    def next_turn(self) -> float:
        return min(self._batch()[0] if self.tokq else math.inf, self._next_loop())

    def next_busy_turn(self) -> float:
        return self.next_turn() if self.busy() else math.inf

    def run(self, until: float, dispatch: Callable[[int, float], None],
            deliver: Callable[[list, float], None]) -> None:
        """Run every pass of the event loop and tokenizer batch that starts by ``until``: ``dispatch(i, t)`` when
        request ``i`` is tokenized and handed to the engine core, ``deliver(payload, t)`` when a message's tokens
        reach the client. A callback may add intakes or messages; later passes serve them."""
        intake, msgs, tokq = self.intake, self.msgs, self.tokq
        while intake or msgs or tokq:
            tok = self._batch() if tokq else None
            start_tok = tok[0] if tok else math.inf
            start_loop = self._next_loop()
            if min(start_tok, start_loop) > until:
                return
            if start_tok <= start_loop:
                k = tok[1]
                batch = tokq[:k]
                del tokq[:k]
                end = start_tok + sum(work for _, _, work in batch)
                self.tok_free = end
                for _, i, _ in batch:
                    dispatch(i, end)
                continue
            if msgs and (not intake or intake[0][0] >= msgs[0][0]):
                blk = msgs.popleft()              # no request waiting: a jump's messages processed as they come
                self.loop_free = end = max(start_loop + blk[3], blk[0])
                if blk[2]:
                    self.payloads -= 1
                    deliver(blk[2], end)
                continue
            self._pass(start_loop, deliver)

    def _pass(self, s: float, deliver: Callable[[list, float], None]) -> None:
        """One pass of the event loop from ``s`` over all it has ready (asyncio runs every ready callback once
        per pass; what becomes ready meanwhile waits for the next pass: CPython's ``BaseEventLoop._run_once``
        runs the ``len(self._ready)`` callbacks queued when the pass began): the messages produced by ``s`` and
        the requests that came by ``s``, in the order they came. A request takes several steps (the body and the
        chat template, then its set-up once tokenized), each waiting for everyone's step before it, so the
        requests of a pass leave it together, at its end, for the tokenizer's queue."""
        intake, msgs = self.intake, self.msgs
        k = bisect.bisect_right(intake, (s, math.inf, math.inf))
        taken, blocks = intake[:k], []
        del intake[:k]
        while msgs and msgs[0][4] <= s:
            blk = msgs[0]
            if blk[0] > s:                        # a jump still producing: the messages so far
                self._split(blk, s)
                if msgs[0] is blk:
                    break
            blocks.append(msgs.popleft())
        t, c, n = s, self.intake_work, 0
        for blk in blocks:                        # first come, first served: a message after the requests
            while n < k and taken[n][0] <= blk[4]:      # that came before it was produced
                t += c
                n += 1
            t += blk[3]
            if blk[2]:
                self.payloads -= 1
                deliver(blk[2], t)
        t += (k - n) * c
        self.loop_free = t
        for _, i, work in taken:
            bisect.insort(self.tokq, (t, i, work))


class VLLMServers:
    """``vllm serve --api-server-count k``: k API server processes in front of one engine core, each with its own
    event loop and tokenizer thread (:class:`VLLMFrontEnd`). Their uvicorn workers share the listening socket,
    so requests spread over them: request i goes to server i mod k. The engine core sends each server the
    outputs of its own requests, one message a step (the scheduler's ``update_from_output`` groups a step's
    outputs by each request's ``client_index``, one ``EngineCoreOutputs`` per API server), so every server
    pays the per-message cost and its share of the per-request cost.

    ``intake``, ``msgs``, ``tokq`` and ``payloads`` are the servers' together (what waits anywhere)."""

    PRICES_REQUESTS = True          # each server's output handler prices its requests' outputs

    def __init__(self, servers: int, *terms: float):
        self.k = servers
        self.servers = [VLLMFrontEnd(*terms) for _ in range(servers)]

    @property
    def intake(self) -> list:
        return [x for s in self.servers for x in s.intake]

    @property
    def tokq(self) -> list:
        return [x for s in self.servers for x in s.tokq]

    @property
    def msgs(self) -> list:
        return [x for s in self.servers for x in s.msgs]

    @property
    def payloads(self) -> int:
        return sum(s.payloads for s in self.servers)

    def arrive(self, t: float, i: int, work: float) -> None:
        self.servers[i % self.k].arrive(t, i, work)

    def produce(self, t: float, count: int, payload: list | None = None, requests: int = 0,
                since: float | None = None) -> None:
        """As :meth:`VLLMFrontEnd.produce`, each server taking the payload of its own requests and an equal share
        of the request outputs (spread as the requests are)."""
        if not payload:
            for s in self.servers:
                s.produce(t, count, None, requests / self.k, since)
            return
        parts: dict[int, list] = {}
        for p in payload:
            parts.setdefault(p[0] % self.k, []).append(p)
        for j, part in parts.items():
            self.servers[j].produce(t, count, part, requests * len(part) / len(payload), since)

    def busy(self) -> bool:
        return any(s.busy() for s in self.servers)

    def next_turn(self) -> float:
        return min(s.next_turn() for s in self.servers)

    def next_busy_turn(self) -> float:
        return min(s.next_busy_turn() for s in self.servers)

    def run(self, until: float, dispatch: Callable[[int, float], None],
            deliver: Callable[[list, float], None]) -> None:
        """Run each server up to ``until``, again while a delivery has brought one of them a request due by then."""
        while True:
            for s in self.servers:
                s.run(until, dispatch, deliver)
            if not any(t <= until and t < math.inf for t in (s.next_turn() for s in self.servers)):
                return
