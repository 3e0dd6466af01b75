"""vLLM's API server as the engine's front end (``engine="vllm"``), in place of SGLang's TokenizerManager.

Read from vllm-project/vllm (``vllm/utils/async_utils.py`` at 007e04ac, ``vllm/v1/engine/async_llm.py`` at
00080ee1, ``vllm/v1/engine/core.py`` at ac3cb2e2). Two serial resources, where SGLang has one event loop that
does both (:class:`~sacmodel.serving.engine.frontend.FrontEnd`):

- **The tokenizer thread.** ``AsyncMicrobatchTokenizer`` runs every encode call on one thread
  (``ThreadPoolExecutor(max_workers=1)``), off the event loop. Its batcher takes the first queued prompt once
  the thread is free, waits ``batch_wait_timeout_s`` (``vllm_tokenizer_wait``, 2 ms) or until 32 prompts are
  queued, then tokenizes the batch: ``t_token`` per prompt token, one prompt after another; every request of the
  batch goes on to the engine core when the batch is done. Tokenizing does not hold up the outputs.
- **The output handler.** ``AsyncLLM.output_handler`` pulls the engine core's outputs, one message per engine
  step, and runs ``OutputProcessor.process_outputs`` over the requests in it (incremental detokenisation,
  stop checks, a ``RequestOutput`` pushed to each request's stream): ``vllm_output_message`` per message and
  ``vllm_output_request`` per request in it, in order, on the event loop. A first or last token reaches the
  client when its message has been processed; while the handler keeps up, that is one message's work after
  the step; when a step's outputs take longer than the step, the tokens fall behind.

The engine core takes requests in between its steps (``run_busy_loop``: ``_process_input_queue``, then
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
    """vLLM's API server: the tokenizer thread's batches and the output handler's messages (times in s).

    ``msgs`` blocks are [produced, messages, payload, work (s), since (s)]: ``since`` is when the block's first
    message was produced (a jump of identical decode steps produces its messages over [since, produced])."""

    PRICES_REQUESTS = True          # its output handler's time per request output

    def __init__(self, tokenizer_wait: float, per_message: float, per_request: float,
                 batch: int = VLLM_TOKENIZER_BATCH):
        super().__init__()
        self.wait, self.per_message, self.per_request, self.batch = tokenizer_wait, per_message, per_request, batch
        self.tok_free = 0.0             # when the tokenizer thread finishes its batch
        self.out_free = 0.0             # when the output handler finishes its message

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
        else:
            self.msgs.append([t, count, None, work, t if since is None else min(since, t)])

    def _batch(self) -> tuple[float, int]:
        """The tokenizer's next batch: (when it starts tokenizing, how many queued prompts it takes)."""
        intake = self.intake
        first = max(self.tok_free, intake[0][0])
        k = bisect.bisect_right(intake, (first + self.wait, math.inf, math.inf))
        if k >= self.batch:
            return max(first, intake[self.batch - 1][0]), self.batch
        return first + self.wait, k

    def _next_output(self) -> float:
        """When the output handler starts on its next message (inf: none queued)."""
        if not self.msgs:
            return math.inf
        blk = self.msgs[0]
        return max(self.out_free, blk[4])

    def next_turn(self) -> float:
        return min(self._batch()[0] if self.intake else math.inf, self._next_output())

    def next_busy_turn(self) -> float:
        if self.intake or self.payloads > 0:
            return self.next_turn()
        return math.inf

    def run(self, until: float, dispatch: Callable[[int, float], None],
            deliver: Callable[[list, float], None]) -> None:
        """Run every tokenizer batch and output message that starts by ``until``: ``dispatch(i, t)`` when request
        ``i`` is tokenized and handed to the engine core, ``deliver(payload, t)`` when a message's tokens reach
        the client. A callback may add intakes or messages; later passes serve them."""
        intake, msgs = self.intake, self.msgs
        while intake or msgs:
            tok = self._batch() if intake else None
            start_tok = tok[0] if tok else math.inf
            start_out = self._next_output()
            if min(start_tok, start_out) > until:
                return
            if start_tok <= start_out:
                k = tok[1]
                batch = intake[:k]
                del intake[:k]
                end = start_tok + sum(work for _, _, work in batch)
                self.tok_free = end
                for _, i, _ in batch:
                    dispatch(i, end)
                continue
            blk = msgs.popleft()
            end = max(start_out + blk[3], blk[0])      # a jump's messages: processed as they come
            self.out_free = end
            if blk[2]:
                self.payloads -= 1
                deliver(blk[2], end)
