"""The GPU check (issue #64): on a machine with a CUDA GPU, one command of a few minutes that measures the app against
transformers on that GPU, checks that speculative decoding is exact there, and opens every page on it.

    python -m benchmarks.gpu_check [--max-new 128] [--out gpu_check.json]

It prints, for the embedded pair (SmolLM2-135M-Instruct and its shipped draft) on the app's default prompt, greedy:

1. the GPU, torch and transformers, and how the target's passes run there (``passes``: graphed static passes, or the
   dynamic ones) with the target's one-token step and its verification passes over 2..9 tokens (the machine profile);
2. for float32 and bfloat16, one table of tokens a second: transformers' ``generate`` and its assisted generation
   (the best of its default schedule, γ 4 and γ 6, with the same draft), beside the race's lanes as the Race page
   measures them (the target alone, then the draft model at γ 4, EAGLE, n-gram) and ``--fastest`` (its choice raced,
   or, where no draft pays on this GPU, said so); each over its own target alone and whether its text is the target's;
3. exactness on the GPU in float32: greedy speculative output identical to the target alone for the draft model's
   chain at γ 2 and 5, its tree, and EAGLE; speculative sampling's first tokens against the target's p
   (chi-square, with the power to catch a broken residual);
4. every page opened once with ``SPECVIZ_DEVICE=cuda`` in AppTest, any exception printed.

It exits 1 if an exactness check or a page fails. ``--device cpu`` runs the same on a CPU (slow: a rehearsal).
Docs: docs/gpu.md (how to carry the repository, the wheels and the embedded GGUF to a GPU that reaches no registry).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from benchmarks.bench_machine import hf_generate
from specviz.analysis.defaults import fastest_config
from specviz.analysis.lab import chi_square_power, goodness_of_fit, output_law
from specviz.analysis.race import run_race, target_alone_summary
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair, speculative_decode
from specviz.engine.baseline import autoregressive_decode
from specviz.limits import DEFAULT_PROMPT
from specviz.models.loading import encode_prompt
from specviz.models.profile import model_profile
from specviz.registry.drafters import DRAFT_MODEL, EAGLE, NGRAM
from specviz.rules.distributions import softmax32
from specviz.rules.sampling import BrokenResidualRule

LANES = {
    "draft model, γ 4": dict(drafter=DRAFT_MODEL, gamma=4),
    "EAGLE": dict(drafter=EAGLE),
    "n-gram": dict(drafter=NGRAM),
}
ASSISTED_GAMMAS = (None, 4, 6)  # None: transformers' own schedule
SAMPLE_SIZES = (500, 1000, 2000, 4000)  # first tokens drawn for the sampling check: the first with the power wanted
POWER = 0.99  # the chance the sampling check has of catching a broken residual (resampling from p)


def timed(run) -> tuple[float, list[int]]:
    """Seconds and output of ``run()``, the GPU synchronised before and after."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    output = run()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started, output


def transformers_rows(pair: ModelPair, ids: list[int], max_new: int) -> tuple[dict, list[dict]]:
    """transformers' ``generate`` (warmed, then timed) and its best assisted generation over the same draft."""
    hf_generate(pair.target, ids, 8)
    seconds, reference = timed(lambda: hf_generate(pair.target, ids, max_new))
    generate = {"lane": "transformers generate", "tokens_per_s": len(reference) / seconds, "ids": reference}
    assisted, draft = [], pair.draft.model if pair.draft is not None else None
    for gamma in ASSISTED_GAMMAS:
        schedule = {} if gamma is None else dict(num_assistant_tokens=gamma, num_assistant_tokens_schedule="constant")
        seconds, output = timed(
            lambda schedule=schedule: hf_generate(pair.target, ids, max_new, assistant_model=draft, **schedule)
        )
        name = f"transformers assisted, {'default' if gamma is None else f'γ {gamma}'}"
        assisted.append({"lane": name, "tokens_per_s": len(output) / seconds, "ids": output})
    return generate, assisted


def race_rows(config: DecodeConfig, pair: ModelPair, prompt: str) -> list[dict]:
    """The race's lanes as the Race page measures them: the target alone, then each of :data:`LANES`."""
    race = run_race([(config.replace(**changes), pair) for changes in LANES.values()], prompt)
    target = race.lanes[0]
    rows = [{"lane": "race: target alone", "tokens_per_s": tokens_per_s(target), "ids": list(target.output_ids)}]
    for name, lane in zip(LANES, race.lanes[1:]):
        rows.append({"lane": f"race: {name}", "tokens_per_s": tokens_per_s(lane), "ids": list(lane.output_ids)})
    return rows


def tokens_per_s(lane) -> float:
    return len(lane.output_ids) / (lane.total_ms / 1e3) if lane.total_ms else 0.0


def fastest_row(config: DecodeConfig, prompt: str) -> dict:
    """``python -m specviz race --fastest``: its choice raced against its target alone, or the target alone where no
    draft pays here."""
    chosen, words, pays = fastest_config(config)
    pair = load_pair(chosen)
    if not pays:
        alone = target_alone_summary(chosen, pair, prompt, None)["target_alone"]
        return {"lane": "race --fastest: the target alone", "words": words, "tokens_per_s": alone["tokens_per_s"]}  # type: ignore[index]
    summary = run_race([(chosen, pair)], prompt).summary()
    return {
        "lane": f"race --fastest ({chosen.draft_dtype} draft, γ {chosen.gamma})",
        "words": words,
        "tokens_per_s": summary["speculative"]["tokens_per_s"],  # type: ignore[index]
        "over_target": summary["speedup"],
        "identical": summary["identical"],
    }


def precision_table(dtype: str, device: str, max_new: int) -> list[dict]:
    """Every row of one precision's table, each with its speedup over its own target alone and its agreement."""
    config = DecodeConfig(dtype=dtype, device=device, rule="greedy", max_new_tokens=max_new)
    pair = load_pair(config)
    ids = encode_prompt(pair.target.tokenizer, DEFAULT_PROMPT, True)
    generate, assisted = transformers_rows(pair, ids, max_new)
    best = max(assisted, key=lambda row: row["tokens_per_s"])
    raced = race_rows(config, pair, DEFAULT_PROMPT)
    for row in assisted:
        row.update(over_target=row["tokens_per_s"] / generate["tokens_per_s"], identical=row["ids"] == generate["ids"])
    for row in raced[1:]:
        row.update(over_target=row["tokens_per_s"] / raced[0]["tokens_per_s"], identical=row["ids"] == raced[0]["ids"])
    raced[0].update(over_generate=raced[0]["tokens_per_s"] / generate["tokens_per_s"])
    app_best = max(raced[1:], key=lambda row: row["tokens_per_s"] if row["identical"] else 0.0)
    app_best["over_assisted_best"] = app_best["tokens_per_s"] / best["tokens_per_s"]
    rows = [generate, *assisted, *raced, fastest_row(config, DEFAULT_PROMPT)]
    for row in rows:
        row.pop("ids", None)
        row["dtype"] = dtype
    return rows


def machine_rows(device: str) -> dict:
    """The GPU, the versions, and the embedded target's passes there as its profile measured them."""
    import transformers

    pair = load_pair(DecodeConfig(device=device))
    profile = model_profile(pair.target)
    return {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "passes": pair.target.passes,
        "target_step_ms": profile.step_ms,
        "target_pass_ms_1_to_9": list(profile.pass_ms),
    }


def exactness(device: str) -> list[str]:
    """The exactness checks on ``device`` in float32; the failures, in words (empty: all hold)."""
    config = DecodeConfig(device=device, rule="greedy", max_new_tokens=48)
    pair = load_pair(config)
    ids = encode_prompt(pair.target.tokenizer, DEFAULT_PROMPT, True)
    alone = autoregressive_decode(config, pair, ids)[0]
    checks = {
        "chain γ 2": dict(drafter=DRAFT_MODEL, gamma=2),
        "chain γ 5": dict(drafter=DRAFT_MODEL, gamma=5),
        "tree": dict(drafter="tree", tree_mode="constant", branching=2, tree_depth=3),
        "EAGLE": dict(drafter=EAGLE),
    }
    failures = []
    for name, changes in checks.items():
        output = speculative_decode(config.replace(**changes), prompt_ids=ids, pair=pair).output_ids
        print(f"  greedy {name}: {'identical to' if output == alone else 'DIFFERS from'} the target alone")
        if output != alone:
            failures.append(f"greedy {name} differs from the target alone")
    failures += sampling_check(config, pair, ids)
    return failures


def sampling_check(config: DecodeConfig, pair: ModelPair, ids: list[int]) -> list[str]:
    """Speculative sampling's first tokens (one drafted token checked) against the target's p: the chi-square test
    accepts p, and at this many samples it would reject a broken residual's law."""
    assert pair.draft is not None
    with torch.inference_mode():
        p = softmax32(pair.target.model(torch.tensor([ids], device=pair.target.device)).logits[0, -1]).cpu()
        q = softmax32(pair.draft.model(torch.tensor([ids], device=pair.draft.device)).logits[0, -1]).cpu()
    sampled = config.replace(drafter=DRAFT_MODEL, rule="sample", gamma=3, max_new_tokens=2)
    broken = output_law(BrokenResidualRule(), p, q)
    samples = next((n for n in SAMPLE_SIZES if chi_square_power(p, broken, n) >= POWER), SAMPLE_SIZES[-1])
    tokens = [
        speculative_decode(sampled.replace(seed=s), prompt_ids=ids, pair=pair).output_ids[0] for s in range(samples)
    ]
    fit, power = goodness_of_fit(tokens, p), chi_square_power(p, broken, samples)
    print(
        f"  sampling's first tokens against p: chi-square p-value {fit:.3f} over {samples} draws (power against a "
        f"broken residual {power:.3f})"
    )
    failures = [] if fit > 1e-3 else [f"sampling's first tokens do not follow p (p-value {fit:.2g})"]
    return failures + ([] if power >= POWER else [f"the sampling check's power is only {power:.2f} at {samples}"])


def page_failures(device: str) -> list[str]:
    """Every page opened once in AppTest with ``SPECVIZ_DEVICE`` set; the pages that raised, with the exception."""
    from streamlit.testing.v1 import AppTest

    from specviz.ui.navigation import PAGES

    os.environ["SPECVIZ_DEVICE"] = device
    failures = []
    for page in PAGES:
        at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=600)
        at.run().switch_page(page.path).run()
        print(f"  {page.title}: {'exception' if at.exception else 'opened'}")
        if at.exception:
            failures.append(f"{page.title}: {[e.message for e in at.exception]}")
    return failures


def print_table(rows: list[dict]) -> None:
    for row in rows:
        speed = f"{row['tokens_per_s']:8.1f} tokens/s" if "tokens_per_s" in row else " " * 17
        over = f"{row['over_target']:.2f}x its target alone" if row.get("over_target") else ""
        extra = "".join(
            f" · {words}"
            for words in (
                f"{row['over_generate']:.2f}x generate" if "over_generate" in row else "",
                f"{row['over_assisted_best']:.2f}x assisted's best" if "over_assisted_best" in row else "",
                ("identical" if row["identical"] else "NOT identical") if "identical" in row else "",
                row.get("words", ""),
            )
            if words
        )
        print(f"  {row['dtype']:9s} {row['lane']:44s} {speed}  {over}{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--max-new", type=int, default=128)
    parser.add_argument("--out", default=None, help="also write every figure to this JSON file")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA GPU here (use --device cpu for a rehearsal on the CPU)")
    started = time.perf_counter()
    machine = machine_rows(args.device)
    print(f"# GPU check: {machine['device']}, torch {machine['torch']}, transformers {machine['transformers']}")
    print(
        f"  the target's passes: {machine['passes']}; one-token step {machine['target_step_ms']:.2f} ms, passes over "
        f"1..9 tokens {' '.join(f'{ms:.2f}' for ms in machine['target_pass_ms_1_to_9'])} ms"
    )
    rows = []
    for dtype in ("float32", "bfloat16"):
        print(f"## the embedded pair in {dtype}, {args.max_new} new tokens, greedy, the app's default prompt")
        table = precision_table(dtype, args.device, args.max_new)
        print_table(table)
        rows += table
    print("## exactness in float32")
    failures = exactness(args.device)
    print(f"## every page with SPECVIZ_DEVICE={args.device}")
    failures += page_failures(args.device)
    verdict = "all checks hold" if not failures else "FAILED: " + "; ".join(failures)
    print(f"# {time.perf_counter() - started:.0f} s; {verdict}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump({"machine": machine, "rows": rows, "failures": failures}, out, indent=2)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
