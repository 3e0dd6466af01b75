"""The documented scenario template printed by ``sacmodel scenarios --template`` (it loads as it is).

Kept as a Python string so that it ships with the package and is never listed as a built-in scenario.
"""

TEMPLATE = """\
# A sacmodel scenario: your hardware, the model it serves and the serving software's settings.
# Start from this file (`sacmodel scenarios --template > mine.yaml`), replace the numbers with yours, then
#   sacmodel predict --scenario mine.yaml --system cxl --context 32K
# Rules: every number is {value: NUMBER UNIT, source: WHERE IT COMES FROM}. Units are parsed (GB = 1e9 B,
# GiB = 2^30 B, "26 GB/s", "750 ns", "148 TFLOP/s", "100 Gbit/s"); arithmetic is not evaluated. Keep a
# source for every number (a datasheet, a measurement, or "fitted: <data>" after `sacmodel calibrate`).
# As shipped, the numbers describe one socket of the SAC testbed (see topologies/sac-testbed.yaml).
schema_version: 1
name: my-cluster                 # shown in every output
description: one host, 8 GPUs, a DRAM pool, a CXL pool of 2 devices behind a switch, 2 RDMA NICs
model: deepseek-v3.2             # `sacmodel models` lists the catalog; or a path to a Hugging Face config.json

# Nodes: id, kind and the fields of that kind. `count: N` makes N identical nodes id[0]..id[N-1].
# Kinds and their fields (* = required):
#   gpu: hbm_capacity*, hbm_bandwidth*, flops_bf16*, flops_fp8*, flops_fp4, nvlink_bandwidth (per direction),
#        memory_reported (what nvidia-smi shows; SGLang sizes its pool from it), sms
#   cpu_root_complex, pcie_switch, cxl_adapter, cxl_switch: bandwidth, latency
#   host_dram: capacity*, bandwidth*, latency*       cxl_device: capacity*, bandwidth*, latency*
#   rdma_nic: rate*, op_cost* (per RDMA READ), latency
#   remote_memory: capacity*, bandwidth, latency
nodes:
  - id: gpu
    kind: gpu
    count: 8
    hbm_capacity: {value: 96 GB, source: "datasheet (H20: 96 GB HBM3)"}
    hbm_bandwidth: {value: 4.0 TB/s, source: "datasheet (H20: 4.0 TB/s)"}
    flops_bf16: {value: 148 TFLOP/s, source: "datasheet (H20: 148 TFLOPS BF16 dense)"}
    flops_fp8: {value: 296 TFLOP/s, source: "datasheet (H20: 296 TFLOPS FP8 dense)"}
    nvlink_bandwidth: {value: 450 GB/s, source: "datasheet (H20: NVLink 900 GB/s both directions)"}
    memory_reported: {value: 97871 MiB, source: "nvidia-smi memory.total"}
    sms: {value: 78, source: "datasheet (H20: 78 SMs)"}
  - {id: rc, kind: cpu_root_complex, description: "CPU root complex"}
  - id: dram
    kind: host_dram
    capacity: {value: 1 TB, source: "server configuration"}
    bandwidth: {value: 358 GB/s, source: "8 channels x DDR5-5600 x 8 B"}
    latency: {value: 100 ns, source: "typical local DRAM load latency"}
  - {id: cxl_adapter, kind: cxl_adapter, description: "PCIe 5.0 x16 CXL adapter"}
  - {id: cxl_switch, kind: cxl_switch, description: "CXL 2.0 switch"}
  - id: cxl_dev
    kind: cxl_device
    count: 2
    capacity: {value: 1 TB, source: "device datasheet"}
    bandwidth: {value: 22.5 GB/s, source: "measured per device"}
    latency: {value: 750 ns, source: "measured 64 B access"}
  - id: nic
    kind: rdma_nic
    count: 2
    rate: {value: 100 Gbit/s, source: "NIC datasheet"}
    op_cost: {value: 0.446 us, source: "fitted: SAC testbed micro-benchmark (one READ per 656 B entry)"}
  - id: remote_pool
    kind: remote_memory
    capacity: {value: 1 TB, source: "memory server configuration"}

# Links: from, to, protocol and bandwidth (each direction; bandwidth_reverse when the way back differs),
# optional latency (one way) and per_flow_bandwidth (the most one flow gets). A link between a group
# (count > 1) and one node connects every member. Protocols: pcie4 pcie5 pcie6 cxl2 cxl3 ddr4 ddr5 rdma
# nvlink upi internal.
links:
  - from: gpu
    to: rc
    protocol: pcie5
    bandwidth: {value: 55 GB/s, source: "pinned host<->GPU copy over PCIe 5.0 x16"}
    latency: {value: 473 ns, source: "fitted: SAC testbed micro-benchmark (one-way GPU<->root complex)"}
  - {from: rc, to: dram, protocol: ddr5, bandwidth: {value: 358 GB/s, source: "8 x DDR5-5600 channels"}}
  - from: rc
    to: cxl_adapter
    protocol: pcie5
    bandwidth: {value: 33 GB/s, source: "measured CPU->CXL write per adapter"}
    bandwidth_reverse: {value: 46 GB/s, source: "measured CXL->CPU read per adapter"}
    per_flow_bandwidth: {value: 26 GB/s, source: "measured GPU->CXL, root-complex bound"}
  - {from: cxl_adapter, to: cxl_switch, protocol: cxl2, bandwidth: {value: 63 GB/s, source: "PCIe 5.0 x16 raw"}}
  - {from: cxl_switch, to: cxl_dev, protocol: cxl2, bandwidth: {value: 31.5 GB/s, source: "PCIe 5.0 x8 raw"}}
  - {from: rc, to: nic, protocol: pcie5, bandwidth: {value: 63 GB/s, source: "NIC host interface PCIe 5.0 x16"}}
  - from: nic
    to: remote_pool
    protocol: rdma
    bandwidth: {value: 100 Gbit/s, source: "NIC line rate"}
    latency: {value: 2 us, source: "RDMA READ round trip order"}

# Which nodes hold each KV-cache pool: dram (host DRAM), cxl (CXL devices), rdma (NICs to remote memory).
pools:
  dram: [dram]
  cxl: [cxl_dev]
  rdma: [nic]

# Serving software settings (SGLang-style): parallelism, memory budget, KV layout, pool sizes in use.
serving:
  dp: {value: 8, source: "--dp-size 8 --enable-dp-attention"}
  tp: {value: 8, source: "--tp 8"}
  ep: {value: 1, source: "--ep-size 1 (experts split over the tp GPUs)"}
  weights: {value: awq-int4, source: "the checkpoint's quantization (fp8, bf16, awq-int4 or fp4)"}
  cuda_graph_max_bs: {value: 512, source: "--cuda-graph-max-bs (decode batches up to this run as CUDA graphs)"}
  mem_fraction: {value: 0.85, source: "--mem-fraction-static 0.85"}
  max_total_tokens: {value: 200000, source: "--max-total-tokens 200000 (device KV slots per rank)"}
  max_running_requests: {value: 2048, source: "max_running_requests printed at start-up (per rank)"}
  weight_bytes_per_param: {value: 0.53125, source: "4-bit weights, group 128 with fp16 scale and zero"}
  kv_dtype: {value: bf16, source: "kv_cache_dtype in the server log (bf16 for DeepSeek DSA on Hopper)"}
  device_buffer: {value: 4096, source: "HiSparse device_buffer_size: GPU buffer slots per request and layer"}
  buffer_extra_slots: {value: 64, source: "HiSparse pads each request's buffer by one page"}
  host_to_device_ratio: {value: 2, source: "HiSparse host pool = 2 x the device pool"}
  page_tokens: {value: 64, source: "--page-size 64"}
  prefill_chunk: {value: 1024, source: "chunked_prefill_size per rank (1024 with DP attention)"}
  load_balance: {value: round_robin, source: "--load-balance-method round_robin"}
  cxl_devices: {value: 2, source: "CXL devices in use"}
  rdma_nics: {value: 2, source: "RDMA NICs in use"}
  cacheline: {value: 64 B, source: "PCIe/CXL 64 B cache line"}
  swap_block_threads: {value: 1024, source: "HiSparse swap-in kernel: one 1024-thread block per request"}
  swap_load_bytes: {value: 8 B, source: "HiSparse swap-in kernel: 8-byte loads, one in flight per lane"}
  stage_passes: {value: 4, source: "RDMA pool prefetch: gather, copy, transpose, scatter (CPU passes over the prompt)"}

# Fitted constants: copied from the SAC testbed fit (a priori where the source says so). Refit them to your
# own runs (with their server logs) with
#   sacmodel calibrate my_runs/ --scenario mine.yaml --out mine-fitted.yaml   (serving constants)
#   sacmodel calibrate --microbench --scenario mine.yaml --out mine-fitted.yaml (fetch path)
# or build a scenario for another GPU with `sacmodel scenarios --build --gpu h200 ...`, which carries them
# over by their transfer rules.
calibration:
  t_kernel: {value: 8.53 us, source: "fitted: SAC testbed"}
  outstanding_lines: {value: 612, source: "fitted: SAC testbed"}
  moe_eff: {value: 0.7, source: "a priori: grouped MoE GEMMs (Marlin AWQ on the testbed) read expert weights at about 70% of HBM bandwidth"}
  hbm_eff: {value: 0.9, source: "constants.md 1c: FlashMLA dense decode 3000 GB/s of 3350 GB/s HBM (H800) = 0.9"}
  sparse_prefill_eff: {value: 0.647, source: "constants.md 1c: FlashMLA sparse prefill up to 640 of 989 TFLOPS BF16 (H800) = 0.647 (1450 of 2250 on B200); the testbed's nsa_prefill_backend is flashmla_sparse"}
  compute_eff: {value: 0.353504, source: "fitted: SAC testbed"}
  t_graph_kernel: {value: 6.20709 us, source: "fitted: SAC testbed"}
  t_collective: {value: 10 us, source: "pytorch/pytorch#114001 and #131739: one-shot intra-node all-reduce of small messages on 8 H100s, 6-17 us"}
  t_hs: {value: 18.0592 ms, source: "fitted: SAC testbed"}
  t_hs_req: {value: 0.23279 ms, source: "fitted: SAC testbed"}
  score_correlation: {value: 0.9995, source: "fitted: SAC testbed"}
  drift_settling: {value: 47.8869, source: "fitted: SAC testbed"}
  settling_steps: {value: 581.606, source: "fitted: SAC testbed"}
  t_request: {value: 1.77127 ms, source: "fitted: SAC testbed"}
  t_token: {value: 0.552366 us, source: "measured: the intake of the released waves of 30 server logs"}
  t_hs_admit: {value: 16.0421 ms, source: "fitted: SAC testbed"}
  t_launch: {value: 48.6 us, source: "a priori: sgl-project/sglang#12160, a one-token DeepSeek-V3 forward 82.6 ms eager against 23.1 ms as a CUDA graph: 42 us more per kernel (61 layers x 23 kernels) over a kernel's in-graph time (6 us)"}
  stage_copy_bw: {value: 2.45951 GB/s, source: "fitted: SAC testbed"}
  prefill_eff: {value: 0.517181, source: "fitted: SAC testbed"}
"""

