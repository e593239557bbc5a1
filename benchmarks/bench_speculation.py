"""Benchmark: speculation that pays on its own, with the draft in each precision (issue #43).

One process. Per pair and target precision: the target's own ``generate`` (transformers, on the same loaded target,
so the same kernels) against the engine (greedy, recording every round) with the draft model in each precision
asked for, at each γ, on held-out prompts no shipped draft saw. Runs are paired per prompt in alternating order
(medians), and every ratio compares totals of the same prompts. Prints, per configuration: tokens/s over
``generate``'s, how many outputs are token-identical to ``generate``'s, the draft's cost ratio c (its direct Llama step
over the target's step, from their profiles) and the greedy acceptance of its drafts; then the process's peak memory.
With ``--assisted-drafts``, transformers' assisted generation runs in the same pairing, on the same loaded target,
with the draft in each precision named, at each γ (a constant number of drafted tokens) and on its own default
schedule (the number adapted round by round, drafting stopped below its confidence threshold), and the engine's
fastest configuration is printed over assisted generation's fastest.

    .venv/bin/python -m benchmarks.bench_speculation [--pairs embedded,qwen-coder] [--dtypes float32]
        [--draft-dtypes float32,bfloat16,int8] [--gammas 3,5] [--trees 2x4] [--prompts 4] [--max-new-tokens 40]
        [--assisted-drafts float32,bfloat16]
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

from benchmarks.bench_machine import PAIRS, hf_generate, pair_config, paired
from specviz import DATA_DIR
from specviz.analysis.roofline import cost_coefficient, pair_profiles
from specviz.config import DecodeConfig
from specviz.engine import load_pair, speculative_decode
from specviz.engine.trace import Trace
from specviz.models.loading import encode_prompt
from specviz.runtime.machine import cpu_name, matrix_units_in_words
from specviz.training.teacher_text import read_prompt_file


def peak_memory_gb() -> float:
    """This process's peak resident memory so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def bench_pair(name: str, dtype: str, draft_dtypes: list[str], gammas: list[int], args: argparse.Namespace) -> None:
    prompt_file = PAIRS[name][2]
    base = pair_config(name, dtype, args.max_new_tokens, args.device).replace(draft_vocab=args.draft_vocab)
    configs, costs = {}, {}
    for draft_dtype in draft_dtypes:
        started = time.perf_counter()
        config = base.replace(draft_dtype=draft_dtype)
        pair = load_pair(config)
        target_profile, draft_profile = pair_profiles(config, pair)
        assert draft_profile is not None, "a draft model has a forward of its own"
        costs[draft_dtype] = cost_coefficient(target_profile, draft_profile)
        print(
            f"  loaded {name} target {dtype} + draft {draft_dtype} in {time.perf_counter() - started:.1f} s: "
            f"target step {target_profile.step_ms:.1f} ms, draft step {draft_profile.step_ms:.2f} ms, "
            f"c = {costs[draft_dtype]:.3f}; peak memory so far {peak_memory_gb():.1f} GB"
        )
        for gamma in gammas:
            configs[f"draft {draft_dtype:8s} γ={gamma}"] = (config.replace(gamma=gamma), pair, draft_dtype)
        for width, depth in args.trees:  # RSD-S beam trees drafted by the same draft, verified in one pass
            tree = config.replace(drafter="tree", tree_mode="beam", beam_width=width, tree_depth=depth)
            configs[f"draft {draft_dtype:8s} tree {width}x{depth}"] = (tree, pair, draft_dtype)
    texts = read_prompt_file(DATA_DIR / prompt_file)[: args.prompts]
    target = load_pair(base).target
    prompt_ids = [encode_prompt(target.tokenizer, text, True) for text in texts]
    assisted = assisted_runs(base, gammas, args)

    # seconds, tokens, identical outputs, drafted, accepted, rounds
    totals = {label: [0.0, 0, 0, 0, 0, 0] for label in ["generate", *configs, *assisted]}
    for ids in prompt_ids:
        functions = {"generate": lambda ids=ids: hf_generate(target, ids, args.max_new_tokens)}
        for label, (config, pair, _) in configs.items():
            functions[label] = lambda c=config, p=pair, ids=ids: speculative_decode(c, prompt_ids=ids, pair=p)
        for label, run in assisted.items():
            functions[label] = lambda run=run, ids=ids: run(ids)
        results = paired(functions, args.repeats)
        reference = results["generate"][1]
        for label, (seconds, result) in results.items():
            output = result.output_ids if isinstance(result, Trace) else result
            row = totals[label]
            row[0] += seconds
            row[1] += len(output)
            row[2] += output == reference
            if isinstance(result, Trace) and result.stats is not None:
                row[3] += result.stats.drafted_tokens
                row[4] += result.stats.accepted_tokens
                row[5] += result.stats.rounds
    base_rate = totals["generate"][1] / totals["generate"][0]
    print(f"\n## {name}, target {dtype} ({len(prompt_ids)} held-out prompts x {args.max_new_tokens} tokens, greedy)")
    print(f"  {'generate':26s} {base_rate:7.2f} tokens/s")
    for label, (_, _, draft_dtype) in configs.items():
        seconds, tokens, same, drafted, accepted, rounds = totals[label]
        print(
            f"  {label:26s} {tokens / seconds:7.2f} tokens/s  {tokens / seconds / base_rate:5.2f}x generate  "
            f"identical {same}/{len(prompt_ids)}  c {costs[draft_dtype]:.3f}  "
            f"acceptance {accepted / max(drafted, 1):.2f}  {tokens / max(rounds, 1):.2f} tokens/round"
        )
    for label in assisted:
        seconds, tokens, same = totals[label][:3]
        print(
            f"  {label:26s} {tokens / seconds:7.2f} tokens/s  {tokens / seconds / base_rate:5.2f}x generate  "
            f"identical {same}/{len(prompt_ids)}"
        )
    best = max(configs, key=lambda label: totals[label][1] / totals[label][0])
    print(f"  fastest: {best.strip()}: {totals[best][1] / totals[best][0] / base_rate:.2f}x generate")
    if assisted:
        peer = max(assisted, key=lambda label: totals[label][1] / totals[label][0])
        ratio = (totals[best][1] / totals[best][0]) / (totals[peer][1] / totals[peer][0])
        print(f"  assisted generation's fastest: {peer.strip()}; the engine's fastest over it: {ratio:.2f}x")
    print(f"  peak memory of this process so far: {peak_memory_gb():.1f} GB")


def assisted_runs(base: DecodeConfig, gammas: list[int], args: argparse.Namespace) -> dict[str, Callable]:
    """transformers' assisted generation on the target of ``base`` with the draft in each precision of
    ``--assisted-drafts``: at each γ, drafting exactly γ tokens a round, and on transformers' default schedule."""
    runs: dict[str, Callable] = {}
    for draft_dtype in filter(None, args.assisted_drafts.split(",")):
        pair = load_pair(base.replace(draft_dtype=draft_dtype))
        schedules = {f"γ={g}": {"num_assistant_tokens": g, "num_assistant_tokens_schedule": "constant",
                                "assistant_confidence_threshold": 0.0} for g in gammas}  # fmt: skip
        schedules["default schedule"] = {}
        for name, options in schedules.items():
            runs[f"assisted {draft_dtype:8s} {name}"] = lambda ids, pair=pair, options=options: hf_generate(
                pair.target, ids, args.max_new_tokens, assistant_model=pair.draft.model, **options
            )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="embedded,qwen-coder")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--draft-dtypes", default="float32,bfloat16,int8")
    parser.add_argument("--gammas", default="3,5")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--draft-vocab", type=int, default=None, help="the draft head's size K (FR-Spec; default: as the draft ships)"
    )
    parser.add_argument(
        "--assisted-drafts", default="", help="draft precisions for transformers' assisted generation, e.g. float32"
    )
    parser.add_argument(
        "--trees",
        default="",
        type=lambda text: [tuple(map(int, shape.split("x"))) for shape in text.split(",") if shape],
        help="beam trees WIDTHxDEPTH to run beside the chains, e.g. 2x4,2x5",
    )
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}; {matrix_units_in_words()}")
    for name in args.pairs.split(","):
        for dtype in args.dtypes.split(","):
            bench_pair(name, dtype, args.draft_dtypes.split(","), [int(g) for g in args.gammas.split(",")], args)


if __name__ == "__main__":
    main()
