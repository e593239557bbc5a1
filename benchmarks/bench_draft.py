"""Benchmark: a draft model against its target alone, in one process, on held-out prompts (default: the embedded
pair and its held-out prompts; ``--pair qwen-coder``: Qwen2.5-Coder-0.5B drafting for -1.5B on held-out code prompts).

Prints, from one run:
  - the target alone (transformers' greedy / sampled ``generate``), tokens/s;
  - the engine (recording every round) with the embedded draft, per gamma, greedy, with the FR-Spec head
    (K tokens) and the full head: acceptance alpha (greedy: argmax q = argmax p), tokens per round, tokens/s,
    speedup over the target alone (each trace paired with a target run just before it, same prompt), the theory
    (1 - a^(g+1)) / ((1 - a)(g c + 1)) at the measured alpha and c,
    and whether the output is token-identical to the target's own greedy text;
  - speculative sampling at temperature 0.7 at every gamma against the target's own sampling;
  - transformers' assisted generation with the same target, the same (full-head) draft and the same fixed
    number of draft tokens, against the engine with the same draft;
  - the draft's cost ratio c for each head size K, the target's cost v(k) of one pass over k + 1 tokens (the
    theory predicted with it next to Thm. 3.8's v = 1; on a CPU also with transformers' default copy of the
    key/value heads, for comparison), and where the engine's time goes: the draft, the target's pass (and its p's),
    checking and recording the round (rule, top-N, token texts), the loop around them, as % of the wall time.

    .venv/bin/python -m benchmarks.bench_draft [--max-new-tokens 64] [--prompts 6] [--gammas 1,2,3,4,5,6]
    .venv/bin/python -m benchmarks.bench_draft --pair qwen-coder --dtype bfloat16 --prompts 3 --gammas 2,4,6 \\
        --heads shipped
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from specviz import DATA_DIR
from specviz.analysis.cost import cost_ratio, verification_costs
from specviz.analysis.metrics import realised_blocks
from specviz.config import DecodeConfig
from specviz.engine import load_pair, prompt_ids_for, speculative_decode
from specviz.limits import DTYPES
from specviz.models.loading import load_location
from specviz.rules.theory import expected_speedup_for_blocks
from specviz.runtime.machine import SHARED_KV_HEADS_FLAG
from specviz.runtime.protocol import first_difference
from specviz.training.draft_model import HELDOUT_FILE
from specviz.training.teacher_text import read_prompt_file


def target_generate(
    pair, prompt_ids, max_new_tokens: int, temperature: float, seed: int, **extra
) -> tuple[list[int], float]:
    """The target's own ``generate`` (greedy at temperature 0): (new ids, seconds)."""
    ids = torch.tensor([prompt_ids], device=pair.target.device)
    sampling = (
        dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature else dict(do_sample=False)
    )
    torch.manual_seed(seed)
    started = time.perf_counter()
    with torch.inference_mode():
        out = pair.target.model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, **sampling, **extra
        )
    return out[0, len(prompt_ids) :].tolist(), time.perf_counter() - started


def verification_costs_copying_kv_heads(pair, prefix: list[int], blocks: list[int]) -> dict[int, float]:
    """v(k) as transformers computes a masked pass by default, each layer's key/value heads copied per
    query head (``repeat_kv``), to compare with the heads shared in place that the models run with on a
    CPU (``share_kv_heads_in_masked_attention``; transformers reads the switch at every call)."""
    os.environ[SHARED_KV_HEADS_FLAG] = "0"
    try:
        return verification_costs(pair, prefix, blocks, pairs=3)
    finally:
        os.environ[SHARED_KV_HEADS_FLAG] = "1"


def paired_runs(config: DecodeConfig, pair, prompts: list[list[int]], baseline):
    """For each prompt, ``baseline(i, prompt)`` -> (ids, seconds) and then one engine trace (every round
    recorded, as the app records it), back to back: on a shared machine whose speed drifts by 20% over
    minutes, each ratio compares runs made within seconds of each other. Returns (traces, baseline runs)."""
    traces, runs = [], []
    for i, prompt in enumerate(prompts):
        runs.append(baseline(i, prompt))
        traces.append(speculative_decode(config.replace(seed=i), prompt_ids=prompt, pair=pair))
    return traces, runs


def identical_share(outputs: list[list[int]], references: list[list[int]]) -> str:
    """The share of the reference tokens the runs reproduced before their first departure ("1.00": identical)."""
    differences = [first_difference(out, ref) for out, ref in zip(outputs, references)]
    before = [len(ref) if at is None else at for at, ref in zip(differences, references)]
    return f"{sum(before) / max(1, sum(map(len, references))):.2f}"


def tokens_per_s(runs) -> float:
    return sum(len(ids) for ids, _ in runs) / sum(seconds for _, seconds in runs)


def summarise(traces) -> dict:
    """Totals over traces: tokens/s, greedy-or-rule alpha, tokens per round, realised blocks, time split."""
    verified = [pos for t in traces for r in t.rounds for pos in r.draft if pos.status != "not_verified"]
    rounds = [r for t in traces for r in t.rounds]
    wall = sum(t.stats.wall_ms for t in traces) / 1e3
    tokens = sum(t.stats.new_tokens for t in traces)
    draft_s, verify_s = sum(r.draft_ms for r in rounds) / 1e3, sum(r.verify_ms for r in rounds) / 1e3
    pass_s = sum(r.target_pass_ms for r in rounds) / 1e3
    split = dict(draft=draft_s, target_pass=pass_s, check_and_record=verify_s - pass_s, loop=wall - draft_s - verify_s)
    return dict(
        tokens=tokens,
        seconds=wall,
        tps=tokens / wall,
        alpha=sum(p.alpha for p in verified) / max(1, len(verified)),
        tokens_per_round=tokens / max(1, len(rounds)),
        blocks=[k for t in traces for k in realised_blocks(t)],
        split={part: 100 * seconds / wall for part, seconds in split.items()},
        outputs=[t.output_ids for t in traces],
    )


PAIRS = {  # --pair: (target, draft or None for the config's default, held-out prompts file)
    "embedded": ("embedded", None, HELDOUT_FILE),
    "qwen-coder": ("qwen-coder-1.5b", "qwen-coder-0.5b", DATA_DIR / "heldout_code_prompts.txt"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--dtype", default="float32", choices=DTYPES, help="the models' weights (probabilities are float32)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--prompts", type=int, default=6, help="how many held-out prompts (specviz/data/heldout_prompts.txt)"
    )
    parser.add_argument("--gammas", default="1,2,3,4,5,6")
    parser.add_argument(
        "--vocab-sizes", default="2048,4096,8192,16384,0", help="FR-Spec head sizes for the c table (0 = all)"
    )
    parser.add_argument("--pair", default="embedded", choices=sorted(PAIRS), help="which target and draft")
    parser.add_argument(
        "--assisted-gammas", default="3,4,5", help="draft tokens per round for the assisted-generation comparison"
    )
    parser.add_argument(
        "--heads", default="shipped,all", help="draft heads the engine runs with: shipped (its K), all, or both"
    )
    args = parser.parse_args()
    target_spec, draft_spec, prompts_file = PAIRS[args.pair]
    gammas = [int(g) for g in args.gammas.split(",")]
    n = args.max_new_tokens
    base = DecodeConfig(
        target=target_spec, draft=draft_spec, max_new_tokens=n, device=args.device, dtype=args.dtype, top_n=10
    )
    pair = load_pair(base)
    texts = read_prompt_file(prompts_file)[: args.prompts]
    prompts = [prompt_ids_for(pair, base, t, None) for t in texts]
    shipped_k = pair.draft.vocab_ranking.recommended if pair.draft.vocab_ranking else 0
    heads = sorted({shipped_k if head == "shipped" else 0 for head in args.heads.split(",")}, reverse=True)
    print(
        f"device {pair.target.device} ({pair.target.model.dtype}, "
        f"CPU kernels {torch.backends.cpu.get_cpu_capability()}); "
        f"{len(prompts)} held-out prompts x {n} new tokens; "
        f"draft {pair.draft.name} ({pair.draft.model.config.num_hidden_layers} layers), shipped head K={shipped_k}"
    )

    # warm-up, then the target alone
    target_generate(pair, prompts[0], 8, 0.0, 0)
    greedy = [target_generate(pair, p, n, 0.0, 0) for p in prompts]
    sampled = [target_generate(pair, p, n, 0.7, i) for i, p in enumerate(prompts)]
    print(
        f"\ntarget alone (transformers generate), first pass: greedy {tokens_per_s(greedy):.1f} tok/s, "
        f"sampling T=0.7 {tokens_per_s(sampled):.1f} tok/s"
    )

    print("\n## draft cost ratio c = one draft token / one target token (cached, one-token forwards)")
    prefix = prompts[0] + greedy[0][0][:8]
    costs = {}
    for k in [int(x) for x in args.vocab_sizes.split(",")]:
        costs[k] = statistics.median(
            cost_ratio(base.replace(draft_vocab=k), pair, prefix, repeats=15) for _ in range(3)
        )
        print(f"K={k or 'all':>6}: c = {costs[k]:.3f}")

    if pair.draft.vocab_ranking is not None:
        print(
            "\n## FR-Spec: share of the target's own greedy tokens (these prompts) "
            "that the draft's head of K tokens can propose"
        )
        generated = torch.tensor([t for ids, _ in greedy for t in ids])
        for k in [int(x) for x in args.vocab_sizes.split(",") if int(x)]:
            inside = torch.isin(generated, pair.draft.vocab_ranking.order[:k]).float().mean()
            print(f"K={k:>6}: {inside:.3f} of {len(generated)} tokens")

    verify_cost = verification_costs(pair, prefix, list(range(1, max(gammas) + 1)), pairs=3)
    print("\n## v(k): the target's pass over k + 1 tokens / its one-token step (Thm. 3.8 takes v = 1)")
    print("  ".join(f"k={k}: {v:.2f}" for k, v in verify_cost.items()))
    if os.environ.get(SHARED_KV_HEADS_FLAG) == "1":
        copying = verification_costs_copying_kv_heads(pair, prefix, list(verify_cost))
        print(
            "with the key/value heads copied, as transformers does by default: "
            + "  ".join(f"k={k}: {v:.2f}" for k, v in copying.items())
        )

    best = {}
    for rule, temperature in (("greedy", 0.0), ("sample", 0.7)):
        for k in heads:
            label = f"{rule}{' T=0.7' if rule == 'sample' else ''}, head K={k or 'all'}"
            print(f"\n## engine, {label} (speedup: over the target's generate run just before each trace)")
            print(
                f"{'gamma':>5} {'alpha':>6} {'tok/round':>9} {'target':>7} {'tok/s':>7} {'speedup':>8} {'theory':>7} "
                f"{'meas/theory':>11} {'theory(v)':>9} {'meas/th(v)':>10} {'identical':>9}  "
                "% of wall: draft / target pass / check+record / loop"
            )
            c = costs.get(k) if k in costs else cost_ratio(base.replace(draft_vocab=k), pair, prefix, repeats=15)
            for gamma in gammas:
                config = base.replace(rule=rule, temperature=temperature or 1.0, gamma=gamma, draft_vocab=k)
                traces, runs = paired_runs(
                    config, pair, prompts, lambda i, p, t=temperature: target_generate(pair, p, n, t, i)
                )
                s, target_tps = summarise(traces), tokens_per_s(runs)
                speedup = s["tps"] / target_tps
                theory = expected_speedup_for_blocks(s["alpha"], s["blocks"], c)
                predicted = expected_speedup_for_blocks(s["alpha"], s["blocks"], c, verify_cost)
                same = identical_share(s["outputs"], [ids for ids, _ in runs]) if rule == "greedy" else "-"
                print(
                    f"{gamma:5d} {s['alpha']:6.3f} {s['tokens_per_round']:9.2f} {target_tps:7.1f} {s['tps']:7.1f} "
                    f"{speedup:7.2f}x {theory:6.2f}x {speedup / theory:10.2f}x {predicted:8.2f}x "
                    f"{speedup / predicted:9.2f}x {str(same):>9}  "
                    + " / ".join(f"{share:.1f}" for share in s["split"].values())
                )
                if speedup > best.get(label, (0,))[0]:
                    best[label] = (speedup, gamma, speedup / theory, speedup / predicted)

    print("\n## transformers' assisted generation vs the engine: same target, same full-head draft, fixed draft tokens")
    assistant = (
        AutoModelForCausalLM.from_pretrained(
            load_location(pair.draft.spec)[0],
            dtype=pair.target.model.dtype,
            use_safetensors=True,
            trust_remote_code=False,
        )
        .to(pair.target.device)
        .eval()
    )
    for gamma in [int(g) for g in args.assisted_gammas.split(",")]:
        assistant.generation_config.num_assistant_tokens = gamma
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0
        traces, runs = paired_runs(
            base.replace(gamma=gamma, draft_vocab=0),
            pair,
            prompts,
            lambda i, p: target_generate(pair, p, n, 0.0, 0, assistant_model=assistant),
        )
        hf_tps, ours = tokens_per_s(runs), summarise(traces)
        same = [ids for ids, _ in runs] == ours["outputs"]
        print(
            f"gamma {gamma}: transformers {hf_tps:.1f} tok/s, engine (recording) {ours['tps']:.1f} tok/s -> "
            f"ratio {ours['tps'] / hf_tps:.2f}x (goal >= 1.0); same tokens: {same}"
        )

    print(
        "\n## best gamma per setting (speedup over the target alone; measured / theory, and / theory with v measured)"
    )
    for label, (speedup, gamma, ratio, predicted_ratio) in best.items():
        print(f"{label:32s} gamma {gamma}: {speedup:.2f}x, {ratio:.2f} of theory, {predicted_ratio:.2f} of theory(v)")
    print(f"(draft spec: {pair.draft.spec}; held-out prompts from {Path(prompts_file).name})")


if __name__ == "__main__":
    main()
