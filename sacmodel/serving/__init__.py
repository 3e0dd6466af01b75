"""The single-instance serving model: symbolic cost primitives, KV-cache systems and their data paths, the
top-k access model, the step model, memory capacity, the event engine that follows the SGLang server
(:mod:`sacmodel.serving.engine`), its analytic steady state, :func:`predict` and one-instance trace replay."""
