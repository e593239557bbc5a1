"""Benchmark: every drafter of the embedded target on the same prompts (issue: parallel drafters).

For blockwise heads, the mask-query drafter, the layer-skip self-draft and (with --draft) a draft
model, prints mean tokens per round, acceptance by drafted position, draft milliseconds per round,
and end-to-end tokens/s against plain autoregressive decoding of the same target in this process.

    .venv/bin/python -m benchmarks.bench_drafters [--device cuda] [--gamma 4] [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse

from specviz.analysis.drafters import compare_drafters
from specviz.config import DecodeConfig
from specviz.engine import load_pair, prompt_ids_for

PROMPTS = [  # held out: not in specviz/data/train_prompts.txt
    "Translate to English: Machen sich Hunderte Millionen von Autofahrern Sorgen über ihre Privatsphäre?",
    "Explain speculative decoding to a student in three sentences.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List the days of the week, one per line.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--rule", default="greedy", choices=("greedy", "sample"))
    parser.add_argument("--draft", default=None, help="also compare a draft model (hub id or directory)")
    args = parser.parse_args()
    config = DecodeConfig(
        drafter="model" if args.draft else "layerskip",
        draft=args.draft,
        gamma=args.gamma,
        max_new_tokens=args.max_new_tokens,
        rule=args.rule,
        device=args.device,
    )
    pair = load_pair(config)
    prompts = [prompt_ids_for(pair, config, p, None) for p in PROMPTS]
    kinds = ["blockwise", "maskquery", "layerskip"] + (["model"] if args.draft else [])
    summary, by_position, _ = compare_drafters(config, pair, prompts, kinds)
    print(
        f"device {pair.target.device}, gamma {args.gamma}, rule {args.rule}, "
        f"{len(prompts)} prompts x {args.max_new_tokens} tokens"
    )
    print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print("\nacceptance by drafted position")
    print(
        by_position.pivot(index="position", columns="drafter", values="acceptance_rate").to_string(
            float_format=lambda x: f"{x:.2f}"
        )
    )


if __name__ == "__main__":
    main()
