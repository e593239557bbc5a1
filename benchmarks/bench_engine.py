"""Benchmark: this engine (recording every round) against transformers on the same work.

Compares, on the same model and prompts in one process:
  * the target's plain autoregressive ``generate`` (greedy),
  * transformers' own speculative path where one fits: prompt lookup (``prompt_lookup_num_tokens``)
    for the n-gram drafter; an assistant model (``assistant_model``) for a draft-model pair,
  * this engine with the matching drafter, plus the layer-skip self-draft.
Prints tokens/s, mean tokens per target call (= per round) and the ratios. Target calls are counted
with a forward hook, so transformers' paths get the same accounting as the engine.

    .venv/bin/python -m benchmarks.bench_engine [--device cuda] [--max-new-tokens 64] [--gamma 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from specviz.config import DecodeConfig
from specviz.engine import ModelPair, speculative_decode
from specviz.models.loading import encode_prompt, load_model
from tests.tiny import make_tiny_pair

PROMPTS = [
    "Translate to English: Machen sich Hunderte Millionen von Autofahrern Sorgen über ihre Privatsphäre?",
    "Repeat this sentence exactly three times: the quick brown fox jumps over the lazy dog.",
    "Rewrite this code with type hints:\ndef add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n",
]
TINY_PROMPTS = [[3, 7, 5, 9, 3, 7], [4, 4, 8, 12, 16], [10, 11, 12, 13, 10, 11, 12]]


class CallCounter:
    """Counts forward calls of a module (one per target pass, whoever makes it)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.calls = 0
        self.handle = module.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1


def timed(fn, device: torch.device, repeats: int) -> tuple[float, object]:
    """Median wall time of ``fn()`` over ``repeats`` runs after one warm-up, and its last result."""
    result = fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        result = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def hf_generate(target, prompt_ids, max_new, **kwargs):
    ids = torch.tensor([prompt_ids], device=target.device)
    with torch.inference_mode():
        out = target.model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new, **kwargs
        )
    return out[0, len(prompt_ids) :].tolist()


def measure(label, fn, target, device, repeats):
    counter = CallCounter(target.model)
    seconds, tokens = timed(fn, device, repeats)
    counter.handle.remove()
    calls_per_run = counter.calls / (repeats + 1)
    return dict(
        method=label,
        seconds=seconds,
        tokens=len(tokens),
        tokens_per_s=len(tokens) / seconds,
        tokens_per_call=len(tokens) / calls_per_run,
        output=tokens,
    )


def engine_fn(config, pair, prompt_ids):
    return lambda: speculative_decode(config, prompt_ids=prompt_ids, pair=pair).output_ids


def run_suite(title, target, pair_for, prompts_ids, rows_spec, device, repeats):
    """rows_spec: (label, callable(prompt_ids) -> fn) ; prints per-method totals over all prompts."""
    totals: dict[str, dict] = {}
    outputs: dict[str, list] = {}
    for prompt_ids in prompts_ids:
        for label, make in rows_spec:
            row = measure(label, make(prompt_ids), target, device, repeats)
            agg = totals.setdefault(label, dict(seconds=0.0, tokens=0, calls=0.0))
            agg["seconds"] += row["seconds"]
            agg["tokens"] += row["tokens"]
            agg["calls"] += row["tokens"] / row["tokens_per_call"]
            outputs.setdefault(label, []).append(row["output"])
    plain = totals[rows_spec[0][0]]
    plain_tps = plain["tokens"] / plain["seconds"]
    print(f"\n## {title}")
    print(f"{'method':44s} {'tokens/s':>9s} {'tok/round':>9s} {'vs plain':>9s} {'same output as plain':>21s}")
    for label, agg in totals.items():
        tps = agg["tokens"] / agg["seconds"]
        same = outputs[label] == outputs[rows_spec[0][0]]
        print(f"{label:44s} {tps:9.1f} {agg['tokens'] / agg['calls']:9.2f} {tps / plain_tps:9.2f}x {str(same):>21s}")
    return totals


def ratio_line(totals, ours, theirs):
    a, b = totals[ours], totals[theirs]
    r = (a["tokens"] / a["seconds"]) / (b["tokens"] / b["seconds"])
    print(f"ratio {ours} / {theirs}: {r:.2f}x tokens/s (goal: >= 1.0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    n, gamma = args.max_new_tokens, args.gamma

    embedded = load_model("embedded", args.device)
    device = embedded.device
    print(f"device: {device} ({embedded.model.dtype}), max_new_tokens={n}, gamma={gamma}, repeats={args.repeats}")
    prompts = [encode_prompt(embedded.tokenizer, p, True) for p in PROMPTS]
    base = DecodeConfig(rule="greedy", gamma=gamma, max_new_tokens=n, device=args.device)
    single = ModelPair(embedded)
    totals = run_suite(
        "embedded SmolLM2-135M-Instruct (greedy)",
        embedded,
        None,
        prompts,
        [
            ("transformers generate (plain)", lambda ids: lambda: hf_generate(embedded, ids, n)),
            (
                "transformers prompt lookup",
                lambda ids: (
                    lambda: hf_generate(
                        embedded,
                        ids,
                        n,
                        prompt_lookup_num_tokens=gamma,
                        max_matching_ngram_size=base.value("ngram_max"),
                    )
                ),
            ),
            ("specviz ngram (recording)", lambda ids: engine_fn(base.replace(drafter="ngram"), single, ids)),
            ("specviz layerskip (recording)", lambda ids: engine_fn(base.replace(drafter="layerskip"), single, ids)),
        ],
        device,
        args.repeats,
    )
    ratio_line(totals, "specviz ngram (recording)", "transformers prompt lookup")

    with tempfile.TemporaryDirectory() as tmp:
        dirs = make_tiny_pair(Path(tmp), noise=0.1)  # a draft close enough to its target to pay
        target, draft = load_model(dirs["target"], args.device), load_model(dirs["draft"], args.device)
        pair = ModelPair(target, draft)
        tiny = base.replace(target=dirs["target"], draft=dirs["draft"], drafter="model")
        totals = run_suite(
            "tiny Llama pair (4 layers; draft = target + 10% noise; greedy)",
            target,
            None,
            TINY_PROMPTS,
            [
                ("transformers generate (plain)", lambda ids: lambda: hf_generate(target, ids, n)),
                (
                    "transformers assistant model",
                    lambda ids: (
                        lambda: hf_generate(
                            target,
                            ids,
                            n,
                            assistant_model=draft.model,
                            num_assistant_tokens=gamma,
                            num_assistant_tokens_schedule="constant",
                            assistant_confidence_threshold=0.0,
                        )
                    ),
                ),
                ("specviz draft model (recording)", lambda ids: engine_fn(tiny, pair, ids)),
            ],
            device,
            args.repeats,
        )
        ratio_line(totals, "specviz draft model (recording)", "transformers assistant model")


if __name__ == "__main__":
    main()
