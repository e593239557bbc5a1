"""Benchmark: does torch.compile (inductor, CPU) take the fixed per-layer costs out of a small model's step?

One process, the embedded target (SmolLM2-135M, 30 layers), float32 and bfloat16: its one-token step with a KV cache
after 128 cached tokens, on the kernels the app uses (oneDNN on packed weights, eager), against the same model
compiled by ``torch.compile`` (inductor, weights frozen and packed by inductor, dynamic shapes for the growing
cache). Alternating rounds, medians; prints each step's ms, the ratio, the compile's startup cost, and the largest
logit difference (two exact float32 kernels differ in the last bits).

    .venv/bin/python -m benchmarks.bench_compile [--steps 24] [--rounds 3] [--dtypes float32,bfloat16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import DynamicCache

from specviz.models.loading import _load_pretrained, load_location
from specviz.runtime.cpu.kernel_paths import ONEDNN, use_kernels


def steps_ms(model: torch.nn.Module, prefix: torch.Tensor, steps: int) -> tuple[float, torch.Tensor]:
    """Median ms of ``steps`` one-token steps after a prefill of ``prefix`` (1, T), and the last step's logits."""
    cache = DynamicCache()
    with torch.inference_mode():
        out = model(input_ids=prefix, past_key_values=cache, use_cache=True)
        token = out.logits[:, -1:].argmax(-1)
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            out = model(input_ids=token, past_key_values=cache, use_cache=True)
            times.append((time.perf_counter() - started) * 1e3)
            token = out.logits[:, -1:].argmax(-1)
    return statistics.median(times), out.logits[0, -1].float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()
    import torch._inductor.config as inductor

    inductor.freezing = True  # constant weights: inductor packs them for its CPU matmuls, as torch's docs advise
    source = load_location("embedded")[0]
    prefix = torch.randint(100, 20000, (1, 128))
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        eager, _ = _load_pretrained(source, dtype)
        eager.eval()
        use_kernels(eager, ONEDNN)
        plain, _ = _load_pretrained(source, dtype)
        plain.eval()
        compiled = torch.compile(plain, dynamic=True)
        started = time.perf_counter()
        steps_ms(compiled, prefix, 2)  # compiles the prefill and the step
        startup = time.perf_counter() - started
        rounds: dict[str, list[float]] = {"eager oneDNN": [], "compiled": []}
        logits = {}
        for r in range(args.rounds):
            order = [("eager oneDNN", eager), ("compiled", compiled)]
            for label, model in order if r % 2 == 0 else order[::-1]:
                ms, logits[label] = steps_ms(model, prefix, args.steps)
                rounds[label].append(ms)
        eager_ms, compiled_ms = (statistics.median(rounds[k]) for k in ("eager oneDNN", "compiled"))
        difference = (logits["eager oneDNN"] - logits["compiled"]).abs().max().item()
        print(
            f"{name}: step eager (oneDNN packed) {eager_ms:.2f} ms, compiled {compiled_ms:.2f} ms: "
            f"{eager_ms / compiled_ms:.2f}x; compile startup {startup:.0f} s; largest logit difference {difference:.2e}"
        )


if __name__ == "__main__":
    main()
