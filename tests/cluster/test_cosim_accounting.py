"""Cluster co-simulation laws (issue 36, item 6): every request of a replay accounted for, a disaggregated run hands each request's KV to a decode instance (and the
hand-off takes time over the network, none when co-located), per-request times ordered."""
import numpy as np
import pytest
from measured_data import SHARED, needs_shared

import sacmodel

TRACE = str(SHARED / "traces" / "mooncake_synthetic_trace.jsonl")


def _replay(system="gpu", **kw):
    return sacmodel.replay("sac-cluster-4x", system, TRACE, limit=kw.pop("limit", 40), **kw)


@needs_shared
@pytest.mark.parametrize("pd", [None, "2:2"])
def test_every_request_is_accounted_for(pd):
    p = _replay(pd=pd)
    s, r = p.summary, p.per_request
    n = 40
    assert s["requests"] == n == len(r["arrival"]) == sum(s["requests_by_instance"].values())
    done = int(np.sum(r["completed"]))
    assert done + s["rejected_requests"] + s["unfinished_requests"] == n
    assert np.all(np.asarray(r["e2e_ms"])[np.asarray(r["completed"], bool)] >=
                  np.asarray(r["ttft_ms"])[np.asarray(r["completed"], bool)])


@needs_shared
def test_disaggregated_requests_hand_their_kv_to_a_decode_instance():
    p = _replay(pd="2:2")
    r = p.per_request
    pre, dec = np.asarray(r["instance"]), np.asarray(r["decode_instance"])
    out = np.asarray(r["output_tokens"])
    multi = out > 1
    assert set(pre[multi]).isdisjoint(set(dec[multi]))            # prefill and decode on different instances
    assert np.all(np.asarray(r["handoff_s"], float)[multi] > 0)  # the KV crosses the network: it takes time
    colo = _replay(pd=None).per_request
    assert np.all(np.nan_to_num(np.asarray(colo["handoff_s"], float)) == 0)
