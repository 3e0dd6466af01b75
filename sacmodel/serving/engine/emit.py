"""Tokens leaving the ranks for the front end (:mod:`sacmodel.serving.engine.frontend`).

- **First tokens.** SGLang's overlap scheduler processes a batch's results (a prefill's first tokens) once the
  next batch has been launched, so they leave after that scheduling, with it after the prefix copies it runs
  on the RDMA pool (``disable_overlap_schedule=False`` in the testbed's logs), and, on a rank whose next batch
  runs without a CUDA graph, after the CPU has launched its kernels. One message per rank.
- **Decode tokens.** Each decoding rank streams its tokens every step, one message per rank per step.
- **Last tokens** (:meth:`Emission.last_tokens`). A decode batch's results, a finishing request's last token
  among them, are processed by the same overlap loop after the rank has launched its next batch
  (``process_batch_result_decode`` runs after ``run_batch`` in ``event_loop_overlap``), so a last token leaves
  as a first token does, its rank's send delay after the end of the iteration that computed it: HiSparse's
  step preparation (``t_hs`` + ``t_hs_req`` per request), serialised with the GPU
  (``HiSparseCoordinator.map_last_loc_to_buffer`` copies to the CPU after ``wait_stream`` on the forward
  stream), or the eager launches of an iteration without a CUDA graph. A closed-loop client sends its next
  request then, so the request reaches its rank after that rank's loop has taken requests in for the
  iteration now running (:class:`sacmodel.serving.engine.scheduler.Dispatch`), and waits one decode
  iteration more: a wait as long as a decode step, which grows with the running batch.
"""
from __future__ import annotations

from .frontend import FrontEnd


class Emission:
    """First tokens computed and not yet sent, and the messages of each iteration."""

    def __init__(self, frontend: FrontEnd, rank_of: list[int], out: list[int]):
        self.frontend, self.rank_of, self.out = frontend, rank_of, out
        self.counts = frontend.PRICES_REQUESTS      # whether the front end's time depends on request outputs
        self.unsent: list[int] = []
        self.unsent_last: dict[int, list] = {}      # rank -> (request, True): last tokens not yet sent

    def first_tokens(self, when: float, delays: list[float] | None = None) -> None:
        """Send the first tokens in ``unsent`` at ``when`` (a request of one output token ends with it), rank r's
        ``delays[r]`` s later (the work before the launch of its next batch)."""
        by_rank: dict[int, list] = {}
        rank_of, out, produce = self.rank_of, self.out, self.frontend.produce
        for i in self.unsent:
            r = rank_of[i]
            msg = by_rank.get(r)
            if msg is None:
                msg = by_rank[r] = []
            msg.append((i, False))
            if out[i] <= 1:
                msg.append((i, True))
        # in time order: the front end's queue is first in, first out
        for r in _in_time_order(by_rank, delays):
            msg = by_rank[r]
            produce(when + (delays[r] if delays else 0.0), 1, msg,
                    requests=len({i for i, _ in msg}) if self.counts else 0)
        self.unsent.clear()

    def decode_tokens(self, when: float, decoding: list[int], jump: int, ended: list, tokens: int = 0,
                      since: float | None = None) -> None:
        """The messages of ``jump`` decode steps of the ``decoding`` ranks, run from ``since`` to ``when`` and
        carrying ``tokens`` request outputs; the last tokens of ``ended`` (request, True) pairs wait for their
        rank's next launch (:meth:`last_tokens`)."""
        rank_of = self.rank_of
        self.frontend.produce(when, jump * len(decoding) - len({rank_of[e[0]] for e in ended}) if ended else
                              jump * len(decoding), requests=tokens, since=since)
        if ended:
            last = self.unsent_last
            for e in ended:
                r = rank_of[e[0]]
                if r in last:
                    last[r].append(e)
                else:
                    last[r] = [e]

    def last_tokens(self, when: float, delays: list[float] | None = None) -> None:
        """Send the last tokens held back by :meth:`decode_tokens` at ``when``, rank r's ``delays[r]`` s later
        (its work before the launch of its next batch), one message per rank, in time order."""
        last, produce = self.unsent_last, self.frontend.produce
        for r in _in_time_order(last, delays):
            produce(when + (delays[r] if delays else 0.0), 1, last[r])
        last.clear()


def _in_time_order(ranks, delays: list[float] | None) -> list[int]:
    """The ``ranks`` by their send delay, then by rank (no delays: by rank)."""
    order = sorted(ranks)
    if delays and len(order) > 1:
        order.sort(key=delays.__getitem__)          # a stable sort: ranks of equal delays stay in order
    return order
