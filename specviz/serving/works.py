"""Every costly computation a page shows, by name: one home for what it computes and the key it is shared under.

A page asks for a :class:`Work` (a name, the config and prompt it runs on, its own parameters as plain data) and the
work pool computes it once for every session (:mod:`specviz.serving.pool`). Because a work is data, a lecture plan
can record the works its pages offer and compute them all in advance (:mod:`specviz.serving.lecture`): the name
says what to run, the rest how. Each entry below is the page's computation, pure of streamlit.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from specviz.analysis import drafters, lab, lab_sequences, metrics, numerics, rules, sweep, timing, tree_vs_chain
from specviz.analysis.draft_precision import draft_precision_row
from specviz.analysis.race import run_race
from specviz.config import DecodeConfig
from specviz.engine import prompt_ids_for
from specviz.engine.trace import Trace
from specviz.limits import JobProgress
from specviz.models.profile import PassProfile, model_profile
from specviz.registry.rules import GREEDY
from specviz.serving import estimates
from specviz.serving.pairs import pair_for, trace_key
from specviz.serving.pool import decoding, shared_work
from specviz.settings import ConfigError


@dataclass(frozen=True)
class Work:
    """A computation a page shows: ``name`` (an entry of :data:`WORKS`), the config and prompt it runs on, and its
    own parameters (plain data: numbers, strings, tuples of them)."""

    name: str
    config: DecodeConfig
    prompt: str
    params: tuple[Any, ...] = ()

    @property
    def key(self) -> tuple[Hashable, ...]:
        """The key its result is shared under (a trace's is its config and prompt alone)."""
        return trace_key(self.config, self.prompt, *(() if self.name == TRACE else (self.name, *self.params)))

    @property
    def first_key(self) -> tuple[Hashable, ...]:
        """Where its first result is stored: a live timing keeps one per attempt (``key + (n,)``), the rest one."""
        return self.key + (0,) if WORKS[self.name].measured else self.key

    @property
    def label(self) -> str:
        return WORKS[self.name].label

    def compute(self, on_progress: JobProgress) -> Any:
        return WORKS[self.name].compute(self.config, self.prompt, self.params, on_progress)

    def estimated_seconds(self, target: PassProfile, prompt_tokens: int) -> float:
        """What it costs here, from its target's machine profile (:mod:`specviz.serving.estimates`): its work at
        the one-token step, and reading its prompt of ``prompt_tokens`` tokens once."""
        work = WORKS[self.name].estimate(self.config, self.params, target.step_ms)
        return work + estimates.prompt_seconds(prompt_tokens, target)

    @property
    def loads_pairs(self) -> bool:
        return WORKS[self.name].loads_pairs


WorkComputation = Callable[[DecodeConfig, str, tuple[Any, ...], JobProgress], Any]  # bound into a job
Estimate = Callable[[DecodeConfig, tuple[Any, ...], float], float]
TRACE = "trace"


@dataclass(frozen=True)
class WorkEntry:
    label: str  # what a waiting page calls it
    compute: WorkComputation
    estimate: Estimate  # seconds before it runs: (config, params, the target's one-token step in ms) -> s
    measured: bool = False  # a live timing: measured again on request, one result per attempt
    loads_pairs: bool = False  # it loads other pairs (other precisions): their load comes on top of its estimate


def trace_of(config: DecodeConfig, prompt: str, on_progress: JobProgress) -> Trace:
    """The page's trace: the shared one when it is stored, else decoded here (a work already runs on the pool)."""
    stored = shared_work().cached(Work(TRACE, config, prompt).key)
    return stored if stored is not None else decoding(config, prompt)(on_progress)


def ids_of(config: DecodeConfig, prompt: str) -> list[int]:
    return prompt_ids_for(pair_for(config), config, prompt, None)


def live_speedup(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    return metrics.measured_speedup(trace_of(config, prompt, on_progress), pair_for(config))


def race(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    (lanes,) = params
    return run_race([(c, pair_for(c)) for c in [config] + [config.replace(drafter=d) for d in lanes]], prompt)


def gamma_sweep(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    """The sweep over ``params[0]``'s block sizes, in as many cycles as the button's time budget holds here."""
    (gammas,) = params
    pair = pair_for(config)
    cycles = sweep.sweep_cycles(config, len(gammas), model_profile(pair.target).step_ms)
    return sweep.gamma_sweep(config, pair, ids_of(config, prompt), list(gammas), on_progress, cycles)


def vocab_sweep(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    pair = pair_for(config)
    if pair.draft is None or pair.draft.vocab_ranking is None:
        raise ConfigError(f"{config.draft} ships no token frequency ranking, so its head cannot be trimmed")
    return sweep.vocab_sweep(config, pair, ids_of(config, prompt), on_progress=on_progress)


def rules_on_draft(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    """Every rule on the draft of round ``params[0]`` (1-based) of the page's trace (a tree round's: its leading
    branch, :func:`~specviz.analysis.rules.compared_draft`)."""
    (choice,) = params
    trace = trace_of(config, prompt, on_progress)
    rnd = trace.rounds[choice - 1]
    prefix = trace.prompt_ids + trace.output_ids[: rnd.prefix_len - len(trace.prompt_ids)]
    draft = rules.compared_draft(rnd)
    return rules.compare_rules_on_draft(config, pair_for(config), prefix, draft.token_ids, draft.by_model)


def departures(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    return rules.lossy_departures(config, pair_for(config), ids_of(config, prompt), on_progress)


def exact_lab(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    (samples,) = params
    pair = pair_for(config)
    ids = ids_of(config, prompt)
    exact = lab.exact_lab(config, pair, ids, samples, seed=config.seed)
    return exact, pair.target.tokenizer, lab_sequences.first_position_laws(config, pair, ids)  # and part 2's power


def lab_decodes(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    """The lab's real decodes: ``params`` (decodes per arm, None: as many as the power target needs at the first
    position, :func:`~specviz.analysis.lab_sequences.default_sequence_samples`; tokens per decode)."""
    samples, tokens = params
    pair, ids = pair_for(config), ids_of(config, prompt)
    if samples is None:
        power = lab_sequences.power_by_decodes(lab_sequences.first_position_laws(config, pair, ids))
        samples = lab_sequences.default_sequence_samples(power)
    return lab_sequences.sample_sequences(config, pair, ids, samples, tokens, on_progress)


def precisions(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    """The target alone and speculative decoding in each of ``params[0]``'s precisions."""
    (dtypes,) = params
    ids, runs = ids_of(config, prompt), []
    for done, dtype in enumerate(dtypes):
        on_progress(done, len(dtypes), f"Decoding in {dtype}")
        # the pair is not held past its run: the next precision's load may need its memory (serving.pairs)
        runs.append(numerics.precision_run(config.replace(dtype=dtype), pair_for(config.replace(dtype=dtype)), ids))
    return runs


def preset_match_rate(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    """Each of the preset prompts (``params[0]``: (name, text) pairs) in bfloat16."""
    (presets,) = params
    bf16 = config.replace(dtype="bfloat16")
    pair, runs = pair_for(bf16), []
    presets = presets[: numerics.presets_fitting(len(presets), config, model_profile(pair.target).step_ms)]
    for done, (name, text) in enumerate(presets):
        on_progress(done, len(presets), f"{name} ({done + 1} of {len(presets)})")
        runs.append(numerics.precision_run(bf16, pair, prompt_ids_for(pair, bf16, text, None)))
    return runs


def draft_precisions(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    """The target alone once, then speculative decoding with the draft in each of ``params[0]``'s precisions."""
    (dtypes,) = params
    rows, reference = [], None
    for done, draft_dtype in enumerate(dtypes):
        on_progress(done, len(dtypes), f"The draft in {draft_dtype}")
        run = config.replace(draft_dtype=draft_dtype, rule=GREEDY)
        pair = pair_for(run)
        ids = prompt_ids_for(pair, run, prompt, None)
        if reference is None:  # the target alone, once: every draft precision shares this target
            reference = numerics.generate_with_logits(pair, ids, run.max_new_tokens)[0]
        rows.append(draft_precision_row(run, pair, ids, reference))
        del pair  # not held past its run: the next draft precision's load may need its memory
    return rows


def verification_timing(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    (repeats,) = params
    trace = trace_of(config, prompt, on_progress)
    block = (trace.output_ids * config.gamma)[: config.gamma]  # real continuation tokens as the block to verify
    return timing.verification_timing(pair_for(config), trace.prompt_ids, block, repeats)


def drafter_comparison(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    kinds, presets = params
    pair = pair_for(config)
    prompts = [prompt_ids_for(pair, config, text, None) for text in presets]
    return drafters.compare_drafters(config, pair, prompts, list(kinds), on_progress)


def tree_against_chain(config: DecodeConfig, prompt: str, params: tuple, on_progress: JobProgress) -> Any:
    return tree_vs_chain.tree_vs_chain(config, pair_for(config), ids_of(config, prompt), on_progress)


WORKS: dict[str, WorkEntry] = {
    TRACE: WorkEntry(
        "Decoding",
        lambda config, prompt, params, on_progress: decoding(config, prompt)(on_progress),
        estimates.trace,
    ),
    "speedup": WorkEntry("Live timing", live_speedup, estimates.live_timing, measured=True),
    "race": WorkEntry("Race", race, estimates.raced, measured=True),
    "sweep": WorkEntry("Sweeping γ", gamma_sweep, estimates.swept, measured=True),
    "vocab-sweep": WorkEntry("Comparing head sizes", vocab_sweep, estimates.head_sizes),
    "rules": WorkEntry("Verifying", rules_on_draft, estimates.trace),
    "departures": WorkEntry("Decoding β", departures, estimates.departures),
    "exact-lab": WorkEntry("Sampling the first drafted token", exact_lab, estimates.first_position),
    "lab-sequences": WorkEntry("Decoding the samples", lab_decodes, estimates.sequences),
    "numerics": WorkEntry("Comparing precisions", precisions, estimates.each_precision, loads_pairs=True),
    "numerics-presets": WorkEntry(
        "Decoding the presets in bfloat16", preset_match_rate, estimates.presets, loads_pairs=True
    ),
    "draft-precisions": WorkEntry(
        "Comparing the draft's precisions", draft_precisions, estimates.draft_precisions, loads_pairs=True
    ),
    "timing": WorkEntry("Timing", verification_timing, estimates.verification_timing, measured=True),
    "drafters": WorkEntry("Comparing the drafters", drafter_comparison, estimates.drafters),
    "tree_vs_chain": WorkEntry("Comparing tree and chain", tree_against_chain, estimates.tree_against_chain),
}
