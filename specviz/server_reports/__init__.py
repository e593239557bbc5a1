"""What a serving engine (vLLM, SGLang, llama.cpp) reported about its speculative decoding: each engine's report read
(:mod:`~specviz.server_reports.vllm`, :mod:`~specviz.server_reports.sglang`, :mod:`~specviz.server_reports.llamacpp`)
into one record (:mod:`~specviz.server_reports.record`), explained against the theory
(:mod:`~specviz.server_reports.explain`), drawn (:mod:`~specviz.server_reports.figures`) and exported
(:mod:`~specviz.server_reports.export`). The command line's ``engine-report`` and the app's page show it."""
