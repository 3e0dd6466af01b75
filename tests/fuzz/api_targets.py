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


# ---- the surfaces of issue 36 ------------------------------------------------------------------------------
def machine(gpu, **kw) -> dict:
    """``sacmodel.scenario`` built and resolved: its GPUs, pools and the KV pool it holds."""
    import sacmodel
    from sacmodel.serving.config import resolve
    t = sacmodel.scenario(gpu, **kw)
    cfg = resolve(t, "gpu")
    return {"gpus": len(t.gpus), "pools": {k: len(v) for k, v in t.pools.items()}, "tp": cfg.tp, "dp": cfg.dp,
            "max_total_tokens": cfg.max_total_tokens}


def launch_command(system, **settings) -> dict:
    """``sglang_command`` on the testbed: the text, and whether every line is a comment or a command line."""
    from sacmodel.planning.emit import sglang_command
    text = sglang_command("sac-testbed", system, **settings)
    lines = text.splitlines()
    body = [ln for ln in lines if not ln.startswith("#")]
    return {"lines": len(lines), "command_lines": len(body),
            "continued": all(ln.endswith("\\") for ln in body[:-1]) and not body[-1].endswith("\\")}


def price_plan(path, system) -> dict:
    """A price table read and used to price the testbed's configuration of ``system``."""
    from sacmodel.planning.plan import configuration_cost
    return configuration_cost("sac-testbed", system, price_table=path)


def trace_hits(path) -> dict:
    """A trace read and its hit rate counted (unbounded and bounded caches, two instances)."""
    from sacmodel.cluster.hitrate import hit_rates
    from sacmodel.data.traces import load_trace
    tr = load_trace(path)
    out = {"requests": len(tr), "prefix_info": tr.has_prefix_info}
    if tr.has_prefix_info:
        out["hits"] = [r["hit_rate"] for r in hit_rates(tr, ["inf", 2048], instances=2)]
    return out


def shared_prefix_trace(*args, **kw) -> dict:
    """``shared_prefix`` generated: its requests and block ids."""
    import sacmodel
    tr = sacmodel.shared_prefix(*args, **kw)
    return {"requests": len(tr), "blocks": int(len(tr.blocks)), "cached": float(tr.cached.sum())}


def unloaded_sensitivity(system, metric, **kw) -> dict:
    """``sacmodel.sensitivity`` (the unloaded closed form): the elasticities by name."""
    import sacmodel
    rows = sacmodel.sensitivity("sac-testbed", system, metric, **kw)
    return {name: el for name, el, _, _ in rows}
