"""Benchmark: every costly button of every page, timed on each pair as the app opens it (prints seconds per button,
and beside them the estimate the button shows before it is pressed).

Each page's computation is a named work (:mod:`specviz.serving.works`); this runs each with the parameters a page
offers by default, on the app's default prompt and each pair's measured defaults, one after the other in one
process (as the server's worker does), after the pair's first load and trace (timed too). A Prepare-a-lecture run
does exactly this work in advance; the figures say what a class would wait for without it.

    .venv/bin/python -m benchmarks.bench_buttons [--pairs embedded,qwen-coder]
"""

from __future__ import annotations

import argparse
import time

from benchmarks.bench_machine import PAIRS
from specviz.analysis import lab, lab_sequences
from specviz.analysis.defaults import PRECISIONS
from specviz.analysis.draft_precision import draft_precisions_on
from specviz.config import DecodeConfig
from specviz.engine import prompt_ids_for
from specviz.limits import DEFAULT_PROMPT, EMBEDDED, PROMPT_PRESETS
from specviz.models.profile import model_profile
from specviz.registry.drafters import chain_drafter, drafter_entry, state_drafters
from specviz.runtime.machine import cpu_name, matrix_units_in_words
from specviz.serving.pairs import pair_for, with_pair_defaults
from specviz.serving.works import TRACE, Work

SWEPT = (1, 2, 3, 4, 6, 8)  # the Gamma sweep page's default block sizes


def page_works(config: DecodeConfig, prompt: str, samples: int) -> list[tuple[str, Work]]:
    """(page, work) for every costly button, with the parameters each page offers by default (``samples``: the lab's
    decodes per arm, as its page sizes them from the power they have)."""
    sampled, presets = lab.sampling(config), tuple(PROMPT_PRESETS.values())
    works = [
        ("Metrics", Work("speedup", config, prompt)),
        ("Race", Work("race", config, prompt, ((),))),
        ("Gamma sweep", Work("sweep", config, prompt, (SWEPT,))),
        ("Gamma sweep: head sizes", Work("vocab-sweep", config, prompt)),
        ("Compare rules: one draft", Work("rules", config, prompt, (1,))),
        ("Compare rules: β = 1..5", Work("departures", config, prompt)),
        ("Losslessness lab: first token", Work("exact-lab", sampled, prompt, (20_000,))),
        ("Losslessness lab: decodes", Work("lab-sequences", sampled, prompt, (samples, 2))),
        ("Precision: an output per precision", Work("numerics", config, prompt, (PRECISIONS,))),
        ("Precision: draft precisions", Work("draft-precisions", config, prompt, (draft_precisions_on("cpu"),))),
        ("Parallel verification", Work("timing", config, prompt, (5,))),
        ("Recursive: tree vs chain", Work("tree_vs_chain", drafter_entry(config.drafter).tree_config(config), prompt)),
        ("Precision: presets", Work("numerics-presets", config, "", (tuple(PROMPT_PRESETS.items()),))),
    ]
    if config.target == EMBEDDED:  # the drafters on the target's states ship weights for the embedded target only
        kinds = (*state_drafters(), chain_drafter(False), chain_drafter(True))
        works.append(("Parallel drafters", Work("drafters", config, "|".join(presets), (kinds, presets))))
    return works


def lab_samples(config: DecodeConfig, prompt: str) -> int:
    """The lab's default decodes per arm on this pair and prompt (the fewest with the power its page asks)."""
    sampled = lab.sampling(config)
    pair = pair_for(sampled)
    laws = lab_sequences.first_position_laws(sampled, pair, prompt_ids_for(pair, sampled, prompt, None))
    return lab_sequences.default_sequence_samples(lab_sequences.power_by_decodes(laws))


def timed(work: Work) -> float:
    started = time.perf_counter()
    work.compute(lambda done, total, text=None: None)
    return time.perf_counter() - started


def bench(name: str) -> None:
    target, draft, _ = PAIRS[name]
    base = DecodeConfig(target=target, draft=draft, drafter="model", device="cpu", max_new_tokens=32)
    config = with_pair_defaults(base)
    started = time.perf_counter()
    target = pair_for(config).target  # the pair itself not held: a page's work may need its memory
    profile, prompt_tokens = model_profile(target), len(target.tokenizer.encode(DEFAULT_PROMPT))
    samples = lab_samples(config, DEFAULT_PROMPT)
    del target
    print(f"\n## {name}: {config.dtype}, draft in {config.draft_precision}, γ = {config.gamma}")
    print(f"  {'button':34s} {'took':>8s} {'predicted':>8s}  (the estimate its button shows, serving/estimates.py)")
    print(f"  {'first load':34s} {time.perf_counter() - started:6.1f} s")
    for page, work in [("Round view: the trace", Work(TRACE, config, DEFAULT_PROMPT))] + page_works(
        config, DEFAULT_PROMPT, samples
    ):
        estimate = work.estimated_seconds(profile, prompt_tokens)
        print(
            f"  {page:34s} {timed(work):6.1f} s {estimate:6.1f} s{'  + loads' if work.loads_pairs else ''}", flush=True
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default="embedded,qwen-coder")
    args = parser.parse_args()
    print(f"# every button on {cpu_name()} ({matrix_units_in_words()})")
    for name in args.pairs.split(","):
        bench(name)


if __name__ == "__main__":
    main()
