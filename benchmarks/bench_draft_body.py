"""Benchmark: the engine with the draft's direct Llama body (``specviz/llama_step.py``) against the same engine
with transformers' body for the draft, in one process, on held-out prompts. The draft is the embedded draft
model, or with ``--drafter layerskip`` the target's own layers less the skipped ones (Draft & Verify).

Each prompt is decoded with both, back to back, the order alternating from prompt to prompt (this machine's
speed drifts by 20% over minutes); both traces must give the same tokens. Prints, from one run, the ratio of
the summed wall times (transformers' body / direct Llama body) and the spread of the pairs' own ratios.

    .venv/bin/python -m benchmarks.bench_draft_body [--drafter model] [--gamma 2] [--rule greedy] [--prompts 6] \\
        [--repeats 2]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

import specviz.runtime.reference
import specviz.runtime.skipping_forward
from specviz.config import DecodeConfig
from specviz.engine import load_pair, prompt_ids_for, speculative_decode
from specviz.training.draft_model import HELDOUT_FILE
from specviz.training.teacher_text import read_prompt_file


@contextlib.contextmanager
def drafts_through_transformers():
    """Within the block, no model counts as a plain Llama, so the draft runs transformers' own body."""
    modules = (
        specviz.runtime.reference,
        specviz.runtime.skipping_forward,
    )  # the draft model's forward, the layer-skip one
    lean = [module.llama_weights for module in modules]
    for module in modules:
        module.llama_weights = lambda model: None
    try:
        yield
    finally:
        for module, weights in zip(modules, lean):
            module.llama_weights = weights


def timed_trace(config: DecodeConfig, prompt: list[int], pair, body: str) -> tuple[float, list[int]]:
    """(wall ms, output ids) of one engine trace with the named draft body."""
    with drafts_through_transformers() if body == "transformers" else contextlib.nullcontext():
        trace = speculative_decode(config, prompt_ids=prompt, pair=pair)
    return trace.stats.wall_ms, trace.output_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", default="model", choices=("model", "layerskip"))
    parser.add_argument("--gamma", type=int, default=2)
    parser.add_argument("--rule", default="greedy", choices=("greedy", "sample"))
    parser.add_argument("--temperature", type=float, default=0.7, help="for --rule sample")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    config = DecodeConfig(
        drafter=args.drafter,
        max_new_tokens=args.max_new_tokens,
        gamma=args.gamma,
        rule=args.rule,
        temperature=args.temperature,
        top_n=10,
    )
    pair = load_pair(config)
    prompts = [prompt_ids_for(pair, config, text, None) for text in read_prompt_file(HELDOUT_FILE)[: args.prompts]]
    timed_trace(config, prompts[0], pair, "lean")  # warm-up
    totals, ratios = {"lean": 0.0, "transformers": 0.0}, []
    for repeat in range(args.repeats):
        for i, prompt in enumerate(prompts):
            order = ("lean", "transformers") if (i + repeat) % 2 == 0 else ("transformers", "lean")
            runs = {body: timed_trace(config.replace(seed=i), prompt, pair, body) for body in order}
            if runs["lean"][1] != runs["transformers"][1]:
                raise SystemExit(f"prompt {i}: the two draft bodies gave different tokens")
            ratios.append(runs["transformers"][0] / runs["lean"][0])
            for body, (ms, _) in runs.items():
                totals[body] += ms
    print(
        f"{args.drafter} drafter, {args.rule} gamma {args.gamma}, "
        f"{len(ratios)} pairs x {args.max_new_tokens} tokens, same tokens in every pair: "
        f"transformers' body / direct Llama body wall = {totals['transformers'] / totals['lean']:.3f} "
        f"(pairs: median {statistics.median(ratios):.3f}, {min(ratios):.3f} - {max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
