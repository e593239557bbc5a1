"""The math of the verification rules: one module per rule (greedy, speculative sampling, top-β + τ) behind the
:class:`~specviz.rules.acceptance.Rule` protocol, their registry and settings groups, distributions (float32 softmax,
warps, residuals) and the closed-form theory of speedups."""
