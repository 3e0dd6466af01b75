"""A prefill-only or decode-only instance at a fixed load per GPU: the steady step of a disaggregated role.

Published large-scale deployments (prefill and decode servers apart, as SGLang's ``--disaggregation-mode``
runs them) report each role's throughput per node with the other role given unlimited resources: a prefill
server kept full with a fixed number of prompt tokens per GPU, a decode server with a fixed batch per GPU at
a fixed KV length. :func:`role_throughput` prices one such iteration with the step model (the ranks in
lockstep, their shared part over all their tokens, the busiest rank's own part, eager launches overlapped).
"""
from __future__ import annotations

import math

from .config import resolve
from .engine import Model


def role_throughput(scenario, role: str, *, prompt: int, tokens_per_gpu: int | None = None,
                    batch_per_gpu: int | None = None) -> dict:
    """Tokens per second per node of a ``role`` ("prefill" or "decode") server in steady state.

    prefill: every rank prefills ``tokens_per_gpu`` prompt tokens per iteration, in prompts of ``prompt``
    tokens with nothing cached (a fraction of a prompt counts as its share); input tokens per second.
    decode: every rank decodes ``batch_per_gpu`` requests whose KV holds ``prompt`` tokens; output tokens per
    second. Returns the step (s), its parts and the throughput per node of ``host_gpus`` GPUs."""
    cfg = resolve(scenario, "gpu")
    model = Model(cfg)
    t = cfg.topo
    per_host = int(t.node(t.gpus[0]).get("nvlink_domain", len(t.gpus)))
    hosts = max(1, math.ceil(len(t.gpus) / per_host))
    dp = cfg.dp
    seqs = None
    if role == "prefill":
        if not tokens_per_gpu or tokens_per_gpu < 1:
            raise ValueError("role_throughput: a prefill role needs tokens_per_gpu >= 1")
        n = tokens_per_gpu * dp
        prompts = tokens_per_gpu / prompt
        seqs = max(1, round(prompts * dp))
        shared = model.shared(n, True, n, seqs)
        own = prompts * model.prefill(float(prompt), 0.0, True)
        step = model.overlapped(model.joined(shared, own, model.tbo_left(n, True, n, seqs)), model.t_eager)
    elif role == "decode":
        if not batch_per_gpu or batch_per_gpu < 1:
            raise ValueError("role_throughput: a decode role needs batch_per_gpu >= 1")
        n = batch_per_gpu * dp
        shared = model.shared(n, False, n)
        own = model.rank_time(batch_per_gpu, dp, float(prompt), 0.0, swap=False)
        eager = model.t_eager if batch_per_gpu > model.graph_bs else 0.0
        cpu = model.v["hs_on"] * (model.v["t_hs"] + model.v["t_hs_req"] * batch_per_gpu)
        step = model.overlapped(model.joined(shared, own, model.tbo_left(n, False), cpu), eager)
    else:
        raise ValueError(f"role_throughput: role must be 'prefill' or 'decode', got {role!r}")
    return {"role": role, "step_s": step, "shared_s": shared, "own_s": own, "hosts": hosts,
            "terms": model.shared_terms(n, role == "prefill", n, seqs),
            "tok_s_per_node": n / step / hosts}
