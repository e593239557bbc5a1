"""The math of the verification rules: one module per rule (greedy, speculative sampling, top-β + τ) behind the
:class:`~specviz.rules.acceptance.Rule` protocol, each built from its own settings group, distributions (float32
softmax, warps, residuals) and the closed-form theory of speedups. Their registry and settings groups are data in
:mod:`specviz.registry` (:mod:`~specviz.registry.rules`, :mod:`~specviz.registry.rule_settings`), below the config."""
