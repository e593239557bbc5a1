"""The math of the verification rules: distributions (float32 softmax, warps, residuals), the rules'
acceptance tests (greedy, speculative sampling, top-β + τ) and the closed-form theory of speedups."""
