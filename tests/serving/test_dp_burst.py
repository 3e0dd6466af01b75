"""A burst under data-parallel attention, iteration by iteration, in SGLang's order (v0.5.6, 7ae368efd).

Each rank's scheduler picks its own batch (``Scheduler.get_next_batch_to_run``): a prefill batch whenever its
waiting queue has a request it can admit (prefill has priority), else its running batch decodes; only then, with
no speculative decoding, ``prepare_mlp_sync_batch`` gathers the ranks' batch shapes and gives a rank with nothing
an IDLE batch (``scheduler_dp_attn_mixin.prepare_mlp_sync_batch_raw``). So in one global iteration a rank
decodes while another prefills (the iteration lasts as long as the prefill), and a rank with a queue does not
decode until its queue is empty. Hand-worked: A and C go to rank 0, B to rank 1, each prompt one prefill chunk,
three output tokens each.

=========  ==================  ==================
iteration  rank 0              rank 1
=========  ==================  ==================
1          prefill A           prefill B
2          prefill C           decode B (token 2)
3          decode A, C         decode B (token 3)
4          decode A, C         (idle)
=========  ==================  ==================
"""
import math

import pytest

from sacmodel.serving.config import resolve
from sacmodel.serving.engine.loop import open_engine


@pytest.fixture(scope="module")
def burst():
    cfg = resolve("sac-testbed", "gpu")            # the testbed's DP attention, no HiSparse staging
    assert cfg.dp >= 2 and not cfg.hisparse
    eng = open_engine(cfg, max_output=3)
    eng.client.t_token = 0.0                        # no intake work: every request reaches its rank at t = 0
    chunk = cfg.prefill_chunk
    log = []
    plain = eng._iterate

    def iterate(admits, decoding, *rest):
        t0 = eng.t
        plain(admits, decoding, *rest)
        log.append((sorted(r for r, _ in admits), {r: eng.ranks.running[r] for r in decoding}, t0, eng.t))
    eng._iterate = iterate
    for rank in (0, 1, 0):                          # A, B, C
        eng.submit(0.0, chunk, 3, rank=rank)
    for _ in range(1000):
        if eng.finished == eng.table.n and not eng.emit.unsent_last and not eng.emit.unsent:
            break
        eng.step()
    eng.frontend.run(math.inf, eng.dispatch.push, eng.client.deliver)
    return eng, log


def test_a_rank_decodes_in_the_iteration_another_rank_prefills_and_not_while_its_own_queue_waits(burst):
    eng, log = burst
    prefilling = [p for p, _, _, _ in log]
    decoding = [sorted(d) for _, d, _, _ in log]
    # (a rank's running count is read after the iteration: rank 1's B has ended after iteration 3)
    assert prefilling[:2] == [[0, 1], [0]]
    assert decoding[:4] == [[], [1], [0, 1], [0]]
    assert len(log) == 4


def test_the_decode_step_that_runs_beside_a_prefill_lasts_the_prefill(burst):
    """Iteration 2 (rank 0 prefills C, rank 1 decodes B) lasts as long as iteration 1's prefills, not a decode
    step: the ranks step in lockstep. The decode-only iterations are much shorter."""
    _, log = burst
    length = [t1 - t0 for _, _, t0, t1 in log]
    assert length[1] > 3 * length[2] and length[1] > 3 * length[3]
    assert length[1] == pytest.approx(length[0], rel=0.25)


def test_token_times_follow_the_order(burst):
    """B's first token comes with A's (iteration 1), C's one iteration later; B ends after iteration 3, A and C
    after iteration 4, so A waits the whole of C's prefill between its first and second tokens."""
    eng, log = burst
    c = eng.client
    ends = [t1 for _, _, _, t1 in log]
    a, b, cc = 0, 1, 2
    assert c.first[a] == pytest.approx(c.first[b], abs=1e-9)
    assert ends[0] <= c.first[a] < ends[1] <= c.first[cc] < ends[2]
    assert ends[2] <= c.done[b] < ends[3]
    assert c.done[a] >= ends[3] and c.done[cc] >= ends[3]
