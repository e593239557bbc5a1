"""Benchmark: EAGLE (chain and EAGLE-2 dynamic tree) against the target alone and against the draft model, greedy, on
held-out prompts of the embedded target, in one process, paired: on every prompt the target's own ``generate`` runs
just before each method, so every ratio is of times taken side by side.

Prints, from one run:
  - per method (the embedded draft model and EAGLE per gamma; EAGLE-2 trees per depth / top-k / budget): acceptance
    per verified drafted token (as the manifests measure it; a tree's: of its sibling checks), tokens per target
    pass (one pass a round), draft cost c (draft ms per drafted token / ms of one target step, measured by the rule
    page's hooks), speedup over the target's ``generate``, and how many outputs are token-identical to it;
  - dynamic tree vs chain on the same budget: the tree verifying ``budget`` nodes per pass against a chain of
    gamma = budget and one of gamma = depth, tokens per target pass and wall-clock speedup side by side.

    .venv/bin/python -m benchmarks.bench_eagle [--prompts 8] [--max-new-tokens 64] [--gammas 2,3,4,5]
        [--trees 4:4:8,5:4:10] [--dtype float32]
"""

from __future__ import annotations

import argparse
import os
import statistics

from benchmarks.bench_draft import target_generate
from specviz.analysis.cost import cost_ratio
from specviz.analysis.metrics import pooled_acceptance_by_position
from specviz.config import DecodeConfig
from specviz.engine import load_pair, prompt_ids_for, speculative_decode
from specviz.limits import DTYPES
from specviz.training.draft_model import HELDOUT_FILE
from specviz.training.teacher_text import read_prompt_file


def methods(args) -> list[tuple[str, DecodeConfig]]:
    """(label, config) of every method measured."""
    base = DecodeConfig(rule="greedy", max_new_tokens=args.max_new_tokens, dtype=args.dtype, top_n=1)
    chains = [
        (f"{drafter} γ={g}", base.replace(drafter=drafter, gamma=g))
        for g in args.gammas
        for drafter in ("model", "eagle")
    ]
    trees = [
        (
            f"eagle-2 tree depth={d} top-k={k} budget={b}",
            base.replace(drafter="eagle", eagle_tree=True, tree_depth=d, eagle_top_k=k, eagle_budget=b),
        )
        for d, k, b in args.trees
    ]
    return chains + trees


def measure(label: str, config: DecodeConfig, prompts: list[str], pairs: dict) -> dict:
    pair = pairs.setdefault(config.drafter, load_pair(config))
    target_s = method_s = 0.0
    identical = tokens = passes = drafted = accepted = 0
    for prompt in prompts:
        ids = prompt_ids_for(pair, config, prompt, None)
        reference, seconds = target_generate(pair, ids, config.max_new_tokens, 0.0, 0)
        trace = speculative_decode(config, prompt_ids=ids, pair=pair)
        target_s, method_s = target_s + seconds, method_s + trace.stats.wall_ms / 1e3
        identical += trace.output_ids == reference
        tokens += trace.stats.new_tokens
        passes += trace.stats.target_forward_passes
        pooled = pooled_acceptance_by_position([trace])
        drafted, accepted = drafted + int(pooled.verified.sum()), accepted + int(pooled.accepted.sum())
    c = statistics.median(
        cost_ratio(config.replace(eagle_tree=False), pair, prompt_ids_for(pair, config, prompts[0], None), repeats=7)
        for _ in range(3)
    )
    return dict(
        method=label,
        acceptance=accepted / max(1, drafted),
        tokens_per_target_pass=tokens / passes,
        c=c,
        speedup=target_s / method_s,
        identical=f"{identical}/{len(prompts)}",
    )


def table(rows: list[dict]) -> str:
    header = f"{'method':44s} {'accept':>7s} {'tok/pass':>8s} {'c':>6s} {'speedup':>8s} identical"
    lines = [header] + [
        f"{r['method']:44s} {r['acceptance']:7.3f} {r['tokens_per_target_pass']:8.2f} "
        f"{r['c']:6.3f} {r['speedup']:7.2f}x {r['identical']}"
        for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8, help="held-out prompts (from the end of the file)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--gammas", type=lambda s: [int(x) for x in s.split(",")], default=[2, 3, 4, 5])
    parser.add_argument(
        "--trees",
        type=lambda s: [tuple(int(x) for x in t.split(":")) for t in s.split(",")],
        default=[(4, 4, 8), (5, 4, 10)],
        help="depth:top-k:budget of each EAGLE-2 tree",
    )
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    args = parser.parse_args()
    prompts = read_prompt_file(HELDOUT_FILE)[-args.prompts :]
    print(
        f"embedded target, greedy, {len(prompts)} held-out prompts, {args.max_new_tokens} new tokens, {args.dtype}, "
        f"torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}"
    )
    pairs: dict = {}
    rows = []
    for label, config in methods(args):
        rows.append(measure(label, config, prompts, pairs))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print("\n" + table(rows))
    print("\nDynamic tree vs chain on the same budget (nodes the target verifies per pass):")
    for d, k, b in args.trees:
        tree = next(r for r in rows if r["method"] == f"eagle-2 tree depth={d} top-k={k} budget={b}")
        same = [r for r in rows if r["method"] in (f"eagle γ={b}", f"eagle γ={d}")]
        for chain in same:
            print(
                f"  tree(depth {d}, budget {b}) {tree['tokens_per_target_pass']:.2f} tokens/pass, "
                f"{tree['speedup']:.2f}x  vs  {chain['method']} {chain['tokens_per_target_pass']:.2f} tokens/pass, "
                f"{chain['speedup']:.2f}x"
            )
        if not same:
            print(f"  (add gamma {b} or {d} to --gammas to compare tree depth {d} budget {b} with a chain)")


if __name__ == "__main__":
    main()
