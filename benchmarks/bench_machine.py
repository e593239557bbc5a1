"""Benchmark: the machine profile, the kernel paths and what they make of speculative decoding here.

One process; every speed is a ratio of runs paired on the same prompt, in alternating order, medians:
  1. this machine: CPU, flags in words, the memory bandwidth and FLOP rates it reaches (the roofline's slopes);
  2. per pair and precision: the target's one-token step against the memory-bandwidth bound (weight bytes / that
     bandwidth), the profile's v(k), and the profile's own cost (its passes measured afresh, as a first load does);
  3. per pair and precision: the engine (greedy, recording every round) against transformers' ``generate`` on the
     same loaded model (same kernels) over held-out prompts, at each gamma: tokens/s ratio and identical outputs;
     and against transformers' assisted generation with the same draft at the best gamma;
  4. float32 only: how many engine outputs on the fastest kernels equal ``generate`` on torch's default kernels.

    .venv/bin/python -m benchmarks.bench_machine [--pairs embedded,qwen-coder] [--dtypes float32,bfloat16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specviz import DATA_DIR
from specviz.config import DecodeConfig
from specviz.drafters.model import draft_forward_for
from specviz.engine import load_pair, speculative_decode
from specviz.models.loading import encode_prompt
from specviz.models.pass_timing import PROFILE_TOKENS, profile_context, time_passes
from specviz.models.profile import model_profile
from specviz.models.rates import machine_rates
from specviz.runtime.cpu.kernel_paths import DEFAULT, kernels_of, use_kernels
from specviz.runtime.machine import cpu_name, matrix_units_in_words
from specviz.runtime.reference import full_forward
from specviz.training.teacher_text import read_prompt_file

PAIRS = {
    "embedded": ("embedded", None, "heldout_prompts.txt"),
    "qwen-coder": ("qwen-coder-1.5b", "qwen-coder-0.5b", "heldout_code_prompts.txt"),
}


def paired(functions: dict[str, callable], repeats: int) -> dict[str, tuple[float, list[int]]]:
    """Median seconds and the last output of each function, run ``repeats`` times in alternating order."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    outputs = {}
    names = list(functions)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            outputs[name] = functions[name]()
            times[name].append(time.perf_counter() - started)
    return {name: (statistics.median(times[name]), outputs[name]) for name in names}


def hf_generate(loaded, prompt_ids: list[int], max_new: int, **kwargs) -> list[int]:
    ids = torch.tensor([prompt_ids], device=loaded.device)
    with loaded.lock, torch.inference_mode():
        out = loaded.model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new, **kwargs
        )
    return out[0, len(prompt_ids) :].tolist()


def engine(config: DecodeConfig, pair, prompt_ids: list[int]) -> list[int]:
    return speculative_decode(config, prompt_ids=prompt_ids, pair=pair).output_ids


def pair_config(name: str, dtype: str, max_new: int, device: str = "cpu") -> DecodeConfig:
    """A benchmarked pair's greedy config with its draft model, the target in ``dtype``."""
    target_spec, draft_spec, _ = PAIRS[name]
    return DecodeConfig(
        target=target_spec,
        draft=draft_spec,
        drafter="model",
        rule="greedy",
        dtype=dtype,
        device=device,
        max_new_tokens=max_new,
    )


def bench_pair(
    name: str, dtype: str, gammas: list[int], max_new: int, prompts: int, repeats: int, bandwidth: float
) -> None:
    prompt_file = PAIRS[name][2]
    config = pair_config(name, dtype, max_new)
    started = time.perf_counter()
    pair = load_pair(config)
    print(
        f"\n## {name} in {dtype}: loaded in {time.perf_counter() - started:.1f} s, kernels "
        f"target {kernels_of(pair.target.model)}, draft {kernels_of(pair.draft.model)}"
    )
    for loaded in (pair.target, pair.draft):
        for path, p in loaded.profiles.items():
            print(
                f"  {loaded.name} {path:8s} T(1..9) ms: {' '.join(f'{t:.1f}' for t in p.pass_ms)}  "
                f"step {p.bandwidth_gbs:.1f} GB/s, flat (v <= 1.25) up to k = {p.flat_until()}"
            )
    profile = model_profile(pair.target)
    bound = profile.weight_bytes / bandwidth / 1e6
    print(
        f"  target one-token step {profile.step_ms:.1f} ms vs memory-bandwidth bound {bound:.1f} ms "
        f"({profile.weight_bytes / 1e6:.0f} MB at {bandwidth:.1f} GB/s): {profile.step_ms / bound:.2f}x the bound "
        "(goal <= 1.5x)"
    )
    started = time.perf_counter()
    draft = (pair.draft, draft_forward_for(config.draft_vocab, pair.draft))
    for loaded, forward in ((pair.target, full_forward), draft):
        time_passes(loaded, forward, profile_context(loaded))  # one measurement, as a first load on a quiet machine
    print(
        f"  the profile's own cost (target and draft, {PROFILE_TOKENS} pass sizes, this path only): "
        f"{time.perf_counter() - started:.1f} s; cached after the first time"
    )

    texts = read_prompt_file(DATA_DIR / prompt_file)[:prompts]
    prompt_ids = [encode_prompt(pair.target.tokenizer, text, True) for text in texts]
    functions = {"generate": lambda ids: hf_generate(pair.target, ids, max_new)}
    for gamma in gammas:
        functions[f"engine γ={gamma}"] = lambda ids, g=gamma: engine(config.replace(gamma=g), pair, ids)
    totals = {label: [0.0, 0, 0] for label in functions}  # seconds, tokens, identical outputs
    for ids in prompt_ids:
        results = paired({label: (lambda f=f, ids=ids: f(ids)) for label, f in functions.items()}, repeats)
        for label, (seconds, output) in results.items():
            totals[label][0] += seconds
            totals[label][1] += len(output)
            totals[label][2] += output == results["generate"][1]
    base_tps = totals["generate"][1] / totals["generate"][0]
    best = max(gammas, key=lambda g: totals[f"engine γ={g}"][1] / totals[f"engine γ={g}"][0])
    for label, (seconds, tokens, same) in totals.items():
        print(
            f"  {label:18s} {tokens / seconds:7.1f} tokens/s  {tokens / seconds / base_tps:5.2f}x generate  "
            f"identical to generate: {same}/{len(prompt_ids)}"
        )
    print(f"  best gamma {best}: {totals[f'engine γ={best}'][1] / totals[f'engine γ={best}'][0] / base_tps:.2f}x")

    assisted = {
        "engine": lambda ids: engine(config.replace(gamma=best), pair, ids),
        "assisted": lambda ids: hf_generate(
            pair.target,
            ids,
            max_new,
            assistant_model=pair.draft.model,
            num_assistant_tokens=best,
            assistant_confidence_threshold=0.0,
            num_assistant_tokens_schedule="constant",
        ),
    }
    seconds = {"engine": [0.0, 0], "assisted": [0.0, 0]}
    for ids in prompt_ids:
        runs = paired({k: (lambda f=f, ids=ids: f(ids)) for k, f in assisted.items()}, repeats)
        for label, (s, output) in runs.items():
            seconds[label][0] += s
            seconds[label][1] += len(output)
    ratio = (seconds["engine"][1] / seconds["engine"][0]) / (seconds["assisted"][1] / seconds["assisted"][0])
    print(f"  engine / transformers assisted generation (same pair, kernels, γ = {best}): {ratio:.2f}x (goal >= 1.0)")

    if dtype == "float32" and kernels_of(pair.target.model) != DEFAULT:
        fast = [engine(config.replace(gamma=best), pair, ids) for ids in prompt_ids]
        chosen = kernels_of(pair.target.model)
        use_kernels(pair.target.model, DEFAULT)
        reference = [hf_generate(pair.target, ids, max_new) for ids in prompt_ids]
        use_kernels(pair.target.model, chosen)
        same = sum(a == b for a, b in zip(fast, reference))
        print(
            f"  engine on {chosen} kernels vs generate on torch's default kernels: {same}/{len(prompt_ids)} identical"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="embedded,qwen-coder")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--gammas", default="2,3,4,5,6")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    rates = machine_rates()
    bandwidth = rates.bandwidth_gbs
    print(
        f"CPU: {cpu_name()}; {matrix_units_in_words()}\nread bandwidth (256 MB sum): {bandwidth:.1f} GB/s; "
        + ", ".join(f"{dtype} {rate:.0f} GFLOP/s" for dtype, rate in rates.gflops.items())
    )
    for name in args.pairs.split(","):
        for dtype in args.dtypes.split(","):
            bench_pair(
                name,
                dtype,
                [int(g) for g in args.gammas.split(",")],
                args.max_new_tokens,
                args.prompts,
                args.repeats,
                bandwidth,
            )


if __name__ == "__main__":
    main()
