"""The GPU check (issues #64, #72): on a machine with a CUDA GPU, one command of a few minutes that measures the app
against transformers on that GPU, checks that speculative decoding is exact there, and opens every page on it.

    python -m benchmarks.gpu_check [--pairs embedded,qwen-coder] [--max-new 128] [--skip-pages] [--skip-sampling]
        [--out gpu_check.json]

Each section is timed and the JSON file is written again after each one (a check cut short by its time limit keeps
every figure measured before); a section that fails is recorded and the next one runs. For each pair (the embedded
SmolLM2-135M pair; the published Qwen2.5-Coder pair where it is fetched), greedy, on the app's default prompt:

1. the GPU, torch and transformers, and how the target's passes run there (``passes``) with its one-token step and
   its passes over 1..9 tokens (the machine profile, timed to their end on the GPU);
2. per precision, one table of tokens a second: transformers' eager ``generate``, its best target alone (a static
   cache, which transformers compiles on CUDA), and its assisted generation (its default schedule, γ 4 and γ 6, each
   warmed first), beside the race's lanes (the target alone, the draft model at γ 4, EAGLE, n-gram) and
   ``--fastest``; each over its own target alone and whether its text is the target's;
3. in float32, the target alone against transformers' ``generate`` token by token: the first divergence, with the
   target's top-2 logit margin there (a near tie that other kernels may break the other way);
4. a γ sweep of the draft model (γ 1..8) in the race's clock;
5. the graphed passes beside the same passes run eagerly (``SPECVIZ_CUDA_GRAPHS=0``), and how many pass shapes ran
   graphed and how many fell back (any capture that failed fails the check);
6. exactness in float32 (greedy chains at γ 2 and 5, a tree, EAGLE identical to the target alone) and speculative
   sampling's first tokens against p with the power to catch a broken residual (``--skip-sampling`` leaves it out);
7. every page opened once with ``SPECVIZ_DEVICE=cuda`` in AppTest (``--skip-pages`` leaves it out).

It exits 1 if anything failed. ``--device cpu`` runs the same on a CPU (slow: a rehearsal). Docs: docs/gpu.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from benchmarks.bench_machine import hf_generate
from specviz.analysis.check_report import SectionReport, first_divergence, top2_margin
from specviz.analysis.defaults import fastest_config
from specviz.analysis.lab import chi_square_power, goodness_of_fit, output_law
from specviz.analysis.race import run_race, target_alone_summary
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair, speculative_decode
from specviz.engine.baseline import autoregressive_decode
from specviz.limits import DEFAULT_PROMPT
from specviz.models.loading import encode_prompt, forget_loaded_models
from specviz.models.profile import model_profile
from specviz.models.published import PUBLISHED, fetched
from specviz.registry.drafters import DRAFT_MODEL, EAGLE, NGRAM
from specviz.rules.distributions import softmax32
from specviz.rules.sampling import BrokenResidualRule
from specviz.runtime.machine import device_wait
from specviz.runtime.static_passes import GRAPHS_VAR, static_passes

PAIRS = {"embedded": ("embedded", None), "qwen-coder": ("qwen-coder-1.5b", "qwen-coder-0.5b")}
LANES = {
    "draft model, γ 4": dict(drafter=DRAFT_MODEL, gamma=4),
    "EAGLE": dict(drafter=EAGLE),
    "n-gram": dict(drafter=NGRAM),
}
ASSISTED_GAMMAS = (None, 4, 6)  # None: transformers' own schedule
SWEEP_GAMMAS = (1, 2, 3, 4, 5, 6, 8)  # the draft model's block sizes raced in the γ sweep
SAMPLE_SIZES = (500, 1000, 2000, 4000)  # first tokens drawn for the sampling check: the first with the power wanted
POWER = 0.99  # the chance the sampling check has of catching a broken residual (resampling from p)


def timed(run) -> tuple[float, list[int]]:
    """Seconds and output of ``run()``, the GPU idle before and the clock read after it ran there."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device_wait(device)
    started = time.perf_counter()
    output = run()
    device_wait(device)
    return time.perf_counter() - started, output


def warmed_and_timed(run) -> tuple[float, list[int]]:
    """``run()`` once untimed (its first allocations, a compilation, a graph's capture), then timed."""
    run()
    return timed(run)


def transformers_rows(pair: ModelPair, ids: list[int], max_new: int, device: str) -> tuple[dict, list[dict]]:
    """transformers' eager ``generate``, its best target alone (a static cache: compiled by transformers on CUDA) and
    its assisted generation over the same draft, each warmed, then timed."""
    seconds, reference = warmed_and_timed(lambda: hf_generate(pair.target, ids, max_new))
    generate = {"lane": "transformers generate", "tokens_per_s": len(reference) / seconds, "ids": reference}
    rows = [generate]
    if device == "cuda":  # its static cache compiles the step on CUDA: transformers' fastest target alone there
        seconds, output = warmed_and_timed(
            lambda: hf_generate(pair.target, ids, max_new, cache_implementation="static")
        )
        rows.append(
            {"lane": "transformers generate, static cache", "tokens_per_s": len(output) / seconds, "ids": output}
        )
    draft = pair.draft.model if pair.draft is not None else None
    for gamma in ASSISTED_GAMMAS if draft is not None else ():
        schedule = {} if gamma is None else dict(num_assistant_tokens=gamma, num_assistant_tokens_schedule="constant")
        seconds, output = warmed_and_timed(
            lambda schedule=schedule: hf_generate(pair.target, ids, max_new, assistant_model=draft, **schedule)
        )
        name = f"transformers assisted, {'default' if gamma is None else f'γ {gamma}'}"
        rows.append({"lane": name, "tokens_per_s": len(output) / seconds, "ids": output})
    return generate, rows


def race_rows(config: DecodeConfig, pair: ModelPair, prompt: str, lanes: dict[str, dict]) -> list[dict]:
    """The race's lanes as the Race page measures them: the target alone, then each of ``lanes``."""
    race = run_race([(config.replace(**changes), pair) for changes in lanes.values()], prompt)
    target = race.lanes[0]
    rows = [{"lane": "race: target alone", "tokens_per_s": tokens_per_s(target), "ids": list(target.output_ids)}]
    for name, lane in zip(lanes, race.lanes[1:]):
        rows.append({"lane": f"race: {name}", "tokens_per_s": tokens_per_s(lane), "ids": list(lane.output_ids)})
    for row in rows[1:]:
        row.update(over_target=row["tokens_per_s"] / rows[0]["tokens_per_s"], identical=row["ids"] == rows[0]["ids"])
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


def pair_config(pair_name: str, dtype: str, device: str, max_new: int) -> DecodeConfig:
    target, draft = PAIRS[pair_name]
    return DecodeConfig(target=target, draft=draft, dtype=dtype, device=device, rule="greedy", max_new_tokens=max_new)


def precision_table(config: DecodeConfig) -> list[dict]:
    """Every row of one precision's table, each with its speedup over its own target alone and its agreement."""
    pair = load_pair(config)
    ids = encode_prompt(pair.target.tokenizer, DEFAULT_PROMPT, True)
    generate, hf_rows = transformers_rows(pair, ids, config.max_new_tokens, str(pair.target.device.type))
    lanes = (
        LANES
        if pair.draft is not None and config.target == "embedded"
        else {"draft model, γ 4": LANES["draft model, γ 4"], "n-gram": LANES["n-gram"]}
    )
    raced = race_rows(config, pair, DEFAULT_PROMPT, lanes)
    for row in hf_rows[1:]:
        row.update(over_target=row["tokens_per_s"] / generate["tokens_per_s"], identical=row["ids"] == generate["ids"])
    best_alone = max((r for r in hf_rows if "assisted" not in r["lane"]), key=lambda row: row["tokens_per_s"])
    raced[0].update(over_transformers_best_alone=raced[0]["tokens_per_s"] / best_alone["tokens_per_s"])
    assisted = [r for r in hf_rows if "assisted" in r["lane"]]
    app_best = max(raced[1:], key=lambda row: row["tokens_per_s"] if row["identical"] else 0.0)
    if assisted:
        app_best["over_assisted_best"] = app_best["tokens_per_s"] / max(r["tokens_per_s"] for r in assisted)
    rows = [*hf_rows, *raced, fastest_row(config, DEFAULT_PROMPT)]
    for row in rows:
        row.pop("ids", None)
        row["dtype"] = config.dtype
    return rows


def against_generate(config: DecodeConfig) -> dict:
    """The target alone against transformers' ``generate`` token by token (float32): identical, or where they first
    part and the target's top-2 logit margin there."""
    pair = load_pair(config)
    ids = encode_prompt(pair.target.tokenizer, DEFAULT_PROMPT, True)
    ours = autoregressive_decode(config, pair, ids)[0]
    theirs = hf_generate(pair.target, ids, config.max_new_tokens)
    parted = first_divergence(ours, theirs)
    if parted is None:
        return {"identical": True, "tokens": len(ours)}
    with torch.inference_mode():
        context = torch.tensor([ids + ours[:parted]], device=pair.target.device)
        margin = top2_margin(pair.target.model(context).logits[0, -1])
    return {"identical": False, "first_divergence": parted, "top2_logit_margin": margin, "tokens": len(ours)}


def gamma_sweep(config: DecodeConfig) -> list[dict]:
    """The draft model at each of :data:`SWEEP_GAMMAS` against the target alone, in one race."""
    lanes = {f"γ {gamma}": dict(drafter=DRAFT_MODEL, gamma=gamma) for gamma in SWEEP_GAMMAS}
    rows = race_rows(config, load_pair(config), DEFAULT_PROMPT, lanes)
    for row in rows:
        row.pop("ids", None)
    return rows


def graphs_beside_eager(config: DecodeConfig) -> dict:
    """The target alone and the draft model at γ 4 with the passes graphed, then with the same passes run eagerly
    (``SPECVIZ_CUDA_GRAPHS=0``: the models loaded again), and how many pass shapes each model ran graphed and how many
    captures failed (after every section before it)."""
    pair = load_pair(config)
    counts = {
        model.name: {"passes": model.passes, "graphs": passes.graphs, "failed_captures": passes.failed}
        for model in filter(None, (pair.target, pair.draft))
        if model.passes != "dynamic"
        for passes in (static_passes(model),)
    }
    lanes = {"draft model, γ 4": LANES["draft model, γ 4"]}
    graphed = race_rows(config, pair, DEFAULT_PROMPT, lanes)
    forget_loaded_models()
    os.environ[GRAPHS_VAR] = "0"
    try:
        eager = race_rows(config, load_pair(config), DEFAULT_PROMPT, lanes)
    finally:
        del os.environ[GRAPHS_VAR]
        forget_loaded_models()
    for row in (*graphed, *eager):
        row.pop("ids", None)
    return {"captures": counts, "graphed": graphed, "eager": eager}


def machine_rows(config: DecodeConfig) -> dict:
    """The GPU, the versions, and the target's passes there as its profile measured them."""
    import transformers

    pair = load_pair(config)
    profile = model_profile(pair.target)
    return {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "passes": pair.target.passes,
        "target_step_ms": profile.step_ms,
        "target_pass_ms_1_to_9": list(profile.pass_ms),
    }


def exactness(config: DecodeConfig) -> list[str]:
    """The greedy exactness checks in float32; the failures, in words (empty: all hold)."""
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
    return failures


def sampling_check(config: DecodeConfig) -> list[str]:
    """Speculative sampling's first tokens (one drafted token checked) against the target's p: the chi-square test
    accepts p, and at this many samples it would reject a broken residual's law."""
    pair = load_pair(config)
    ids = encode_prompt(pair.target.tokenizer, DEFAULT_PROMPT, True)
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
                f"{row['over_transformers_best_alone']:.2f}x transformers' best target alone"
                if "over_transformers_best_alone" in row
                else "",
                f"{row['over_assisted_best']:.2f}x assisted's best" if "over_assisted_best" in row else "",
                ("identical" if row["identical"] else "NOT identical") if "identical" in row else "",
                row.get("words", ""),
            )
            if words
        )
        print(f"  {row.get('dtype', ''):9s} {row['lane']:44s} {speed}  {over}{extra}", flush=True)


def pairs_here(wanted: list[str]) -> list[str]:
    """The pairs asked for that this machine holds (the published pair only where it is fetched)."""
    published = all(fetched(model) for model in PUBLISHED.values())
    return [name for name in wanted if name == "embedded" or (name in PAIRS and published)]


def run_check(args: argparse.Namespace, report: SectionReport) -> None:
    """Every section of the check, in order, into ``report``."""
    for name in pairs_here(args.pairs.split(",")):
        float32 = pair_config(name, "float32", args.device, args.max_new)
        with report.section(f"{name}: machine") as result:
            result.update(machine_rows(float32))
            print(f"  the target's passes: {result['passes']}; one-token step {result['target_step_ms']:.2f} ms")
        for dtype in args.dtypes.split(","):
            with report.section(f"{name}: {dtype} table") as result:
                result["rows"] = precision_table(pair_config(name, dtype, args.device, args.max_new))
                print_table(result["rows"])
        with report.section(f"{name}: the target alone against transformers' generate, float32") as result:
            result.update(against_generate(float32))
            print(f"  {result}")
        with report.section(f"{name}: γ sweep, float32") as result:
            result["rows"] = gamma_sweep(float32)
            print_table(result["rows"])
        if args.device == "cuda":
            with report.section(f"{name}: graphed passes beside eager ones, float32") as result:
                result.update(graphs_beside_eager(float32))
                print_table(result["graphed"] + result["eager"])
                for model, counts in result["captures"].items():
                    print(f"  {model}: {counts}")
                    if counts["failed_captures"]:
                        report.fail(f"{model}: {counts['failed_captures']} pass shapes failed to capture")
        with report.section(f"{name}: exactness, float32") as result:
            failures = exactness(float32) + ([] if args.skip_sampling else sampling_check(float32))
            result["failures"] = failures
            for words in failures:
                report.fail(words)
    if not args.skip_pages:
        with report.section(f"every page with SPECVIZ_DEVICE={args.device}") as result:
            result["failures"] = page_failures(args.device)
            for words in result["failures"]:
                report.fail(words)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--pairs", default="embedded,qwen-coder", help="comma-separated: embedded, qwen-coder")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="the precisions of the tables")
    parser.add_argument("--max-new", type=int, default=128)
    parser.add_argument("--skip-pages", action="store_true", help="leave out opening every page")
    parser.add_argument("--skip-sampling", action="store_true", help="leave out the sampling check")
    parser.add_argument("--out", default="gpu_check.json", help="the JSON file, written after each section")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here (use --device cpu for a rehearsal on the CPU)", file=sys.stderr)
        return 2
    report, started = SectionReport(Path(args.out)), time.perf_counter()
    print(f"# GPU check on {args.device}: torch {torch.__version__}", flush=True)
    run_check(args, report)
    failures = report.data["failures"]
    verdict = "all checks hold" if not failures else "FAILED: " + "; ".join(failures)
    print(f"# {time.perf_counter() - started:.0f} s; {verdict}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
