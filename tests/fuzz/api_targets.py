"""Python-API targets the fuzz suite calls in its sandbox (``Sandbox.call('tests.fuzz.api_targets:NAME', ...)``):
each runs one reader or function the way a user would and returns plain data for the contract to check."""
from __future__ import annotations


def server_log(path: str) -> dict:
    """A server log read and used: its batch records, the measured round and the decode step times."""
    from sacmodel.data.server_logs import load_server_log
    log = load_server_log(path)
    out = {"ranks": log.ranks, "prefill": log.prefill, "decode": log.decode, "arrivals": log.arrivals,
           "exceptions": len(log.exceptions), "steps": log.step_times()}
    if len(log.arrivals) > 2:
        _, r2 = log.rounds(min(2, len(log.arrivals) - 1))
        out["round2_decode"] = r2.decode
    return out


def model_config(cfg) -> dict:
    """A Hugging Face config mapping through the model catalog's checks, and the sizes derived from it."""
    from sacmodel.hardware.models import from_hf_config
    m = from_hf_config(cfg)
    return {"layers": m.layers, "kv_bytes": m.kv_bytes(), "index_key_bytes": m.index_key_bytes,
            "params_total": m.params_total(), "params_active": m.params_active(),
            "flops_mlp": m.flops_mlp(True), "flops_attn": m.flops_sparse_attn(2048)}


def cluster_file(path: str) -> dict:
    """A cluster file loaded: its instances, hosts and tier capacities."""
    from sacmodel.hardware.scenarios import load_cluster
    cl = load_cluster(path)
    return {"instances": len(cl.instances), "hosts": len(cl.hosts),
            "tiers": {k: t.capacity_tokens for k, t in cl.tiers.items() if t.capacity_tokens != float("inf")}}
