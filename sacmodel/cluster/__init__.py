"""Multi-instance serving: tiered prefix caches, routers, prefill/decode disaggregation over CXL or RDMA,
cluster replay, the hit-rate fast path and cluster planning. Built on the single-instance engine
(:mod:`sacmodel.serving`), used only through ``resolve``, ``Requests`` and ``run_engine``.
"""
