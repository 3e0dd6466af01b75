"""Hypothesis generators of hostile inputs: nasty values, mutations of a parsed document, corrupted text."""
from __future__ import annotations

import copy
import json

from hypothesis import strategies as st

UNITS = ["GB/s", "Gbit/s", "B/s", "TB/s", "B", "GB", "GiB", "KiB", "TB", "ns", "us", "ms", "s", "min", "Hz",
         "1/s", "TFLOP/s", "FLOP/s", "token", "entry", "bit", "furlong", "GB s", "%", "**2", "B*B"]
NASTY = ["", " ", "-5 GB/s", "0", "0 GB/s", "-0", "22.5 Hz", "96", "0.85 GB", "2**10", "9**9**9 B", "1e400 B",
         "nan", "NaN GB/s", "inf", "-inf", ".inf", "1e-300 B/s", "1e308 GB/s", "x" * 5000, "9" * 5000,
         "__import__('os')", "{{7*7}}", "${HOME}", "../../../etc/passwd", "\0", "\udcff", "é", "0x10 B",
         "1_000 B", "32K", "1M", "1.5", "-1", "1e9", True, False, None, [], {}, [1], {"value": 1}, 0, -1, 1,
         2.5, 10**30, -10**30, 9223372036854775808, float("nan"), float("inf"), -float("inf"), 1e-300, 1e300]

numbers = st.one_of(st.integers(-10**6, 10**12), st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.sampled_from(["1e400", "-0.0", "1e-400", ".5", "5.", "007"]))
quantities = st.builds(lambda n, u, sp: f"{n}{sp}{u}", numbers, st.sampled_from(UNITS), st.sampled_from(["", " "]))
nasty = st.one_of(st.sampled_from(NASTY), quantities, st.integers(), st.floats(),
                  st.text(max_size=20), st.booleans(), st.none())


def paths(doc, prefix=()) -> list[tuple]:
    """Every path into a parsed document (mappings and lists), containers included."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, prefix + (i,))
    return out


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def apply(doc, mutation):
    """Apply one mutation (op, path, value) to a deep copy of ``doc``; paths gone by then are skipped."""
    doc = copy.deepcopy(doc)
    op, path, value = mutation
    try:
        parent = _get(doc, path[:-1]) if path else None
        key = path[-1] if path else None
        if op == "set" and path:
            parent[key] = value
        elif op == "delete" and path:
            del parent[key]
        elif op == "add":
            target = _get(doc, path)
            if isinstance(target, dict):
                target[f"unknown_{abs(hash(str(value))) % 97}"] = value
            elif isinstance(target, list):
                target.append(value)
        elif op == "duplicate" and path and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        elif op == "replace_root":
            return value
    except (KeyError, IndexError, TypeError):
        pass
    return doc


def mutations(doc, weights=None):
    """A strategy of one mutation of ``doc``: set a value, delete, add an unknown field, duplicate."""
    ps = paths(doc)
    return st.tuples(st.sampled_from(["set", "set", "set", "delete", "add", "duplicate", "replace_root"]),
                     st.sampled_from(ps), nasty)


@st.composite
def mutated(draw, doc, max_mutations=3):
    n = draw(st.integers(1, max_mutations))
    for _ in range(n):
        m = draw(mutations(doc))
        if m[0] == "replace_root" and draw(st.integers(0, 9)):   # rarely replace the whole document
            continue
        doc = apply(doc, m)
    return doc


@st.composite
def corrupted_text(draw, text: str):
    """``text`` unchanged (mostly), truncated, or with a few characters or bytes inserted."""
    kind = draw(st.sampled_from(["same", "same", "same", "truncate", "insert", "bytes"]))
    data = text.encode("utf-8")
    if kind == "same" or not data:
        return data
    pos = draw(st.integers(0, len(data)))
    if kind == "truncate":
        return data[:pos]
    if kind == "insert":
        junk = draw(st.sampled_from(["[", "{", "]", ":", "\n", "- ", "&a ", "*a", "!!python/object:os.system",
                                     "\t", '"', "'", "\\", "#", "%", "NaN", "Infinity", ",", "\x00"]))
        return data[:pos] + junk.encode() + data[pos:]
    return data[:pos] + draw(st.binary(min_size=1, max_size=4)) + data[pos:]


# ---- the surfaces of issue 36: machines, launch commands, price tables, hostile traces, shared_prefix ---------
WRONG_VALUES = [None, 0, -1, 1.5, 2.0, "8", "x", True, False, [], {}, ["fp8"], float("nan"), float("inf"), 10**9,
                10**30, "\n", "a\nb"]


def _maybe(values, wrong=0.3):
    """A valid value mostly, a wrong one sometimes."""
    return st.one_of(st.sampled_from(values), st.sampled_from(WRONG_VALUES)) if wrong else st.sampled_from(values)


@st.composite
def machine_kwargs(draw):
    """Keyword arguments of ``sacmodel.scenario`` (a GPU name first): valid choices with hostile ones mixed in."""
    gpu = draw(_maybe(["h20", "h100", "h800", "h200", "b200"], wrong=0.1))
    opts = {"gpus": [1, 2, 4, 8, 16, 256, 257], "model": ["deepseek-v3.2", "llama-3.1-8b", "qwen3-32b", "nope"],
            "weights": ["fp8", "bf16", "awq-int4", "fp4"], "kv_dtype": ["auto", "bf16", "fp8"],
            "dp": [1, 2, 4, 8, 3], "tp": [None, 8, 4], "ep": [1, 2, 8], "mem_fraction": [0.5, 0.85, 0.0, 1.0],
            "chunked_prefill": [1024, 8192, 0], "max_total_tokens": [None, 100000, 10**20],
            "pool": [None, "cxl", "rdma", "cxl,rdma", 5, "disk"], "cxl_devices": [None, 1, 2, 1024, 1025, 0],
            "rdma_nics": [None, 1, 2, 1024, 1025, 0]}
    keys = draw(st.lists(st.sampled_from(sorted(opts)), max_size=4, unique=True))
    return gpu, {k: draw(_maybe(opts[k])) for k in keys}


@st.composite
def emit_settings(draw):
    """``sglang_command`` settings: in and out of their ranges, wrong types, control characters in a path."""
    opts = {"dp": [1, 2, 4, 8, 0, 257], "cxl_devices": [1, 2, 4, 1024, 1025, 0],
            "rdma_nics": [1, 2, 3, 1025], "device_buffer": [512, 4096, 0, 2**40],
            "max_total_tokens": [1000, 200000, 2**31, 10**20], "max_running_requests": [1, 64, 2**21],
            "model_path": ["/m", "/models/my model", "$(reboot)", "a\nrm -rf ~", "x\x1b[2J", "é/ü", "", "x" * 2000],
            "bogus": [1]}
    keys = draw(st.lists(st.sampled_from(sorted(opts)), max_size=3, unique=True))
    return {k: draw(_maybe(opts[k], wrong=0.2)) for k in keys}


PRICE_KEYS = ["gpu", "gpu_h20", "gpu_h100", "gpu_h200", "gpu_b200", "dram_gb", "cxl_gb", "cxl_device", "cxl_adapter",
              "cxl_switch", "rdma_nic", "gpux", "GPU", ""]
PRICES = ["1.0", "0.0002", "0", "-1", "1e308", "1.0e+308", ".nan", ".inf", "'3'", "null", "[]", "{}", "true",
          "1e6", "1000001"]


@st.composite
def price_table_text(draw):
    """A price table: rows of known and unknown parts, duplicates, hostile prices, broken YAML."""
    rows = draw(st.lists(st.tuples(st.sampled_from(PRICE_KEYS), st.sampled_from(PRICES)), min_size=0, max_size=8))
    body = "".join(f"  {k}: {{usd_per_hour: {v}}}\n" for k, v in rows)
    head = draw(st.sampled_from(["parts:\n", "parts:\n", "parts: 5\n", "", "prices:\n"]))
    return draw(corrupted_text(head + body))


@st.composite
def hostile_trace(draw):
    """Mooncake lines against the physics of a trace: more block ids than blocks, negative or huge ids, lines
    without hash_ids among lines with them, times out of order."""
    lines = []
    t = 0
    for _ in range(draw(st.integers(1, 6))):
        n_in = draw(st.sampled_from([1, 511, 512, 513, 4096, 20000]))
        most = -(-n_in // 512)
        ids = draw(st.sampled_from(["fit", "fit", "too_many", "negative", "huge", "none"]))
        rec = {"timestamp": t, "input_length": n_in, "output_length": draw(st.sampled_from([1, 8, 64]))}
        if ids == "fit":
            rec["hash_ids"] = list(range(draw(st.integers(0, most))))
        elif ids == "too_many":
            rec["hash_ids"] = list(range(most + draw(st.sampled_from([1, 5000]))))
        elif ids == "negative":
            rec["hash_ids"] = [0, -draw(st.integers(1, 2**40))][:most + 1]
        elif ids == "huge":
            rec["hash_ids"] = [draw(st.sampled_from([2**30, 2**40, 2**62, 2**63 - 1]))]
        lines.append(rec)
        t += draw(st.sampled_from([0, 5, 1000, -7200000]))
    return lines


@st.composite
def shared_prefix_args(draw):
    """``shared_prefix(groups, prompts_per_group, system, question, output, rate=...)`` with sizes that must be
    bounded before anything is allocated."""
    size = st.sampled_from([1, 2, 64, 1000, 10**6, 10**7, 10**8, 0, -1, 2.5, True])
    args = [draw(size) for _ in range(5)]
    kw = {"rate": draw(st.sampled_from([1.0, 100.0, 0.0, -1.0, 1e9, [(1.0, 5.0)], [(1e5, 1e6)], "x"])),
          "block_tokens": draw(st.sampled_from([1, 16, 64, 512, 0, 10**8]))}
    if draw(st.booleans()):
        kw["requests"] = draw(st.sampled_from([1, 10, 10**6, 10**7, 0]))
    return args, kw


# ---- the surfaces added since: bench files, multi-host machines, writers, cluster plans with prices -----------
BENCH_SGLANG = {"backend": "sglang", "dataset_name": "random", "request_rate": float("inf"), "max_concurrency": 2,
                "random_input_len": 512, "random_output_len": 16, "random_range_ratio": 1.0, "completed": 4,
                "duration": 1.0, "total_input_tokens": 2048, "total_output_tokens": 64, "mean_ttft_ms": 100.0,
                "mean_tpot_ms": 10.0, "output_throughput": 64.0}
BENCH_VLLM = {"date": "20261201-120000", "endpoint_type": "openai", "backend": "vllm", "model_id": "deepseek-v3.2",
              "num_prompts": 4, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 2, "duration": 1.5,
              "completed": 4, "failed": 0, "total_input_tokens": 2048, "total_output_tokens": 64,
              "request_throughput": 2.7, "output_throughput": 42.7, "mean_ttft_ms": 120.0, "mean_tpot_ms": 11.0}


def _detailed(rec: dict, n: int) -> dict:
    """``rec`` with SGLang's ``--output-details`` arrays for ``n`` requests of 512 prompt and 16 output tokens."""
    return {**rec, "input_lens": [512] * n, "output_lens": [16] * n, "ttfts": [0.1] * n,
            "itls": [[0.01] * 15 for _ in range(n)], "errors": [""] * n}


@st.composite
def bench_file_text(draw):
    """An SGLang bench_serving JSONL (with or without per-request arrays) or a vLLM ``--save-result`` JSON: small
    valid runs, then fields mutated (types, sizes), arrays cut or grown, lines duplicated, the text truncated."""
    kind = draw(st.sampled_from(["sglang", "sglang_detailed", "vllm", "vllm_detailed"]))
    base = BENCH_VLLM if kind.startswith("vllm") else BENCH_SGLANG
    recs = []
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 6))
        rec = {**base, "completed": n, "max_concurrency": draw(st.sampled_from([1, 2, 4, 10**6])),
               "random_input_len": draw(st.sampled_from([16, 512, 2048])), "random_output_len":
               draw(st.sampled_from([2, 16, 64]))}
        if kind.endswith("detailed"):
            rec = _detailed(rec, n)
        how = draw(st.sampled_from(["keep", "keep", "mutate", "size", "array"]))
        if how == "mutate":
            rec = draw(mutated(rec, max_mutations=2))
        elif how == "size":
            rec[draw(st.sampled_from(["completed", "num_prompts", "max_concurrency", "random_input_len",
                                      "random_output_len", "failed", "total_input_tokens", "duration"]))] = \
                draw(st.sampled_from([0, -1, 10**5, 10**6, 10**9, 2**63, 1e308, 0.5, "4", True, None]))
        elif how == "array" and "ttfts" in rec:
            key = draw(st.sampled_from(["input_lens", "output_lens", "ttfts", "itls", "errors"]))
            op = draw(st.sampled_from(["cut", "grow", "drop", "nasty", "huge"]))
            if op == "cut":
                rec[key] = rec[key][:-1]
            elif op == "grow":
                rec[key] = rec[key] + rec[key][:1]
            elif op == "drop":
                del rec[key]
            elif op == "huge":
                rec[key] = rec[key][:1] * draw(st.sampled_from([10**4, 2 * 10**5]))
            else:
                rec[key] = [draw(nasty)] + rec[key][1:]
        recs.append(rec)
    if kind.startswith("vllm") and len(recs) == 1 and draw(st.booleans()):
        text = json.dumps(recs[0], allow_nan=True, default=str, indent=2)        # one JSON document
    else:
        lines = [json.dumps(r, allow_nan=True, default=str) for r in recs]
        if draw(st.integers(0, 4)) == 0:
            lines.append(lines[draw(st.integers(0, len(lines) - 1))])            # a line twice
        text = "\n".join(lines) + "\n"
    return kind, draw(corrupted_text(text))


MULTIHOST = {"gpus": [8, 9, 16, 24, 32, 64, 128, 256, 257, 4096], "tp": [None, 8, 16, 32, 64, 12, 3],
             "dp": [1, 2, 4, 8, 16, 3], "ep": [None, 1, 8, 16, 32, 64, 3], "pool": [None, "cxl", "rdma", "cxl,rdma"],
             "cxl_devices": [None, 1, 2, 8, 1024, 0], "rdma_nics": [None, 1, 2, 8, 1024, 0],
             "model": ["deepseek-v3.2", "llama-3.1-8b", "qwen3-32b", "deepseek-r1"],
             "weights": ["fp8", "bf16", "awq-int4", "fp4"]}


@st.composite
def multihost_kwargs(draw):
    """``sacmodel.scenario`` across hosts: GPUs beyond one host of 8, TP, DP and EP over them, pools and their
    sizes (a wrong value among them sometimes)."""
    gpu = draw(st.sampled_from(["h20", "h100", "h800", "h200", "b200"]))
    kw = {"gpus": draw(st.sampled_from(MULTIHOST["gpus"]))}
    for k in draw(st.lists(st.sampled_from(sorted(set(MULTIHOST) - {"gpus"})), max_size=5, unique=True)):
        kw[k] = draw(_maybe(MULTIHOST[k], wrong=0.1))
    return gpu, {k: v for k, v in kw.items() if v is not None}


FLAG = {"gpus": "--gpus", "tp": "--tp", "dp": "--dp", "ep": "--ep", "pool": "--pool", "cxl_devices": "--cxl-devices",
        "rdma_nics": "--rdma-nics", "model": "--model", "weights": "--weights"}


def machine_argv(gpu: str, kw: dict) -> list:
    """The CLI's machine flags of ``sacmodel.scenario(gpu, **kw)``."""
    return ["--gpu", gpu] + [x for k, v in kw.items() for x in (FLAG[k], str(v))]


PRICE_ROWS = ["gpu", "gpu_h20", "gpu_h100", "gpu_h200", "gpu_b200", "gpu_h800", "dram_gb", "cxl_gb", "cxl_device",
              "cxl_adapter", "cxl_switch", "rdma_nic", "tpu", "gpu_h200 "]
PRICE_VALUES = ["2.0", "0.001", "100", "1e-9", "0", "-2", "1e308", ".inf", ".nan", "'2.0'", "null", "[1]", "true",
                "1e7"]


@st.composite
def cluster_price_table(draw):
    """A price table for a cluster plan: mostly complete and valid, sometimes a part missing, a row twice, an
    unknown row, a hostile price, broken YAML."""
    rows = {"gpu": "2.0", "cxl_gb": "0.0002", "cxl_adapter": "0.04", "cxl_switch": "0.38", "dram_gb": "0.0002",
            "rdma_nic": "0.06"}
    for k in draw(st.lists(st.sampled_from(sorted(rows)), max_size=2, unique=True)):
        del rows[k]
    lines = [(k, v) for k, v in rows.items()]
    for _ in range(draw(st.integers(0, 2))):
        lines.insert(draw(st.integers(0, len(lines))), (draw(st.sampled_from(PRICE_ROWS)),
                                                         draw(st.sampled_from(PRICE_VALUES))))
    source = draw(st.sampled_from(["", ", source: fuzz", ", source: [1, 2]"]))
    text = "parts:\n" + "".join(f"  {k}: {{usd_per_hour: {v}{source}}}\n" for k, v in lines)
    return draw(corrupted_text(text))
