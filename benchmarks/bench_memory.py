"""Benchmark: the server's memory as a class drives it, pair after pair, in one process (issue #43's scenario).

Loads through the server's own shared cache (``serving.pairs.pair_for``, the memory budget included) the pairs a
class's links would ask for in turn, and prints after each the process's resident memory, its peak so far, the
budget, and which pairs the server still holds. Each step names the pair, the target's precision and the draft's
(int8, the draft precision measured fastest for both pairs here, unless the step names another).

    .venv/bin/python -m benchmarks.bench_memory [--steps qwen-coder:float32,qwen-coder:bfloat16,...]
"""

from __future__ import annotations

import argparse

from benchmarks.bench_machine import PAIRS
from benchmarks.bench_speculation import peak_memory_gb
from specviz.config import DecodeConfig
from specviz.runtime.machine import memory_budget_bytes, resident_bytes
from specviz.serving.pairs import LOADED_PAIRS, pair_for

STEPS = "qwen-coder:float32,qwen-coder:bfloat16,qwen-coder:float16,embedded:float32,qwen-coder:float32:float32"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default=STEPS, help="pair:precision[:draft precision], comma-separated")
    args = parser.parse_args()
    budget = memory_budget_bytes() or 0
    print(f"budget: {budget / 1e9:.1f} GB")
    for step in args.steps.split(","):
        name, dtype, *draft_dtype = step.split(":")
        target, draft, _ = PAIRS[name]
        config = DecodeConfig(target=target, draft=draft, drafter="model", device="cpu", dtype=dtype)
        pair = pair_for(config.replace(draft_dtype=draft_dtype[0] if draft_dtype else "int8"))
        held = [f"{p.target.name} {p.target.precision} + {p.draft.precision}" for p in LOADED_PAIRS.values() if p.draft]
        peak = peak_memory_gb() * 1e9
        print(
            f"{step:32s} resident {resident_bytes() / 1e9:5.1f} GB, peak {peak / 1e9:5.1f} GB "
            f"({peak / budget:.0%} of the budget); held: {'; '.join(held)}"
        )
        del pair


if __name__ == "__main__":
    main()
