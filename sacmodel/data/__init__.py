"""Readers of measured data and traces, validated at the edge: the testbed's runs and manifest, its fetch
micro-benchmark, SGLang server logs, and public request traces (Mooncake JSONL, Azure CSV).
Also the package's own data files (the access table, the price table)."""
