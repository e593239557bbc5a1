"""The gamma sweep and the draft head sweep (the Gamma sweep page).

Pure data in, plain data (pandas) out; no streamlit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pandas as pd

from specviz.analysis.common import decoding_seconds, stats_of, units_in_budget
from specviz.analysis.cost import cost_ratio, machine_cost_ratio, quiet_verification_costs
from specviz.analysis.metrics import realised_blocks, timed_trace
from specviz.analysis.paired import PairedTimes, load_signs, timed_in_cycles
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, autoregressive_decode, speculative_decode
from specviz.limits import SWEEP_GAMMAS_MAX, SWEEP_PAIRS, SWEEP_TOKENS_MAX, TextProgress
from specviz.models.profile import model_profile
from specviz.registry.drafters import DRAFT_MODEL
from specviz.rules.theory import expected_speedup_for_blocks, expected_tokens_for_blocks


def sweep_seconds(target_step_ms: float, tokens: int, gammas: int, cycles: int) -> float:
    """At most what a sweep costs, predicted from the machine profile: per cycle, the target alone's ``tokens`` steps
    and each γ's speculative run, which costs no more than the target alone where speculation pays."""
    return decoding_seconds(cycles * (1 + gammas), tokens, target_step_ms)


def sweep_tokens(config: DecodeConfig) -> int:
    """New tokens per sweep run: the config's, at most :data:`~specviz.limits.SWEEP_TOKENS_MAX`."""
    return min(config.max_new_tokens, SWEEP_TOKENS_MAX)


def sweep_cycles(config: DecodeConfig, gammas: int, target_step_ms: float) -> int:
    """The cycles a sweep of ``gammas`` block sizes runs: as many as :data:`~specviz.limits.BUTTON_BUDGET_S` holds,
    at least one, at most :data:`~specviz.limits.SWEEP_PAIRS`: the one count the page says, the work runs and its
    estimate predicts."""
    return units_in_budget(sweep_seconds(target_step_ms, sweep_tokens(config), gammas, 1), 1, SWEEP_PAIRS)


def planned_sweep_seconds(config: DecodeConfig, gammas: int, target_step_ms: float) -> float:
    """What the sweep the page offers costs before it runs: its :func:`sweep_cycles` at :func:`sweep_tokens`."""
    cycles = sweep_cycles(config, gammas, target_step_ms)
    return sweep_seconds(target_step_ms, sweep_tokens(config), gammas, cycles)


def gamma_sweep(
    config: DecodeConfig,
    pair: ModelPair,
    prompt_ids: list[int],
    gammas: list[int],
    on_progress: TextProgress | None = None,
    cycles: int = SWEEP_PAIRS,
) -> tuple[pd.DataFrame, float]:
    """Time the target alone and each block size once per cycle, ``cycles`` times, the order reversed every other
    cycle (:func:`timed_in_cycles`): every γ's ratio pairs it with the target alone of the same cycle, so a machine
    whose load drifts gives both sides of a ratio the same load, one noisy cycle does not pick the best gamma
    (medians), and the target alone runs once per cycle, not once per γ; return (table, cost ratio c).

    Table columns: measured tokens per round and speedup next to the closed forms evaluated at the
    alpha each run measured: ``expected_speedup`` predicts verification at one target step (Thm. 3.8),
    ``expected_speedup_verify_measured`` at the measured cost v(k) of the target's pass over k + 1 tokens,
    and ``verify_cost`` is the mean v(k) over the run's rounds: above 1 exactly when that predicted theory
    predicts less than Thm. 3.8 (sum E / sum(k c + v) < sum E / sum(k c + 1) iff sum v > the rounds).
    ``wall_s`` is the median over the cycles, ``speedup`` the ratio of the target alone's median time to
    it, ``speedup_low`` and ``speedup_high`` the slowest and fastest cycle's own ratio (the ratio of the
    medians always lies between them); the other columns come from the first trace (seeded: every
    cycle decodes the same tokens).
    """
    gammas = sorted(set(gammas))[:SWEEP_GAMMAS_MAX]
    config = config.replace(max_new_tokens=sweep_tokens(config))
    steps = len(gammas) + 2  # the cycles (spread over the first len(gammas) steps), c, then the verification costs

    def tick(done: int, text: str) -> None:
        if on_progress:
            on_progress(done, steps, text)

    def target_alone() -> tuple[list[int], float]:
        return autoregressive_decode(config, pair, prompt_ids)

    runs: list[Callable[[], tuple[Any, float]]] = [target_alone]
    runs += [partial(timed_trace, config.replace(gamma=gamma), pair, prompt_ids) for gamma in gammas]
    names = ["the target alone"] + [f"γ = {gamma}" for gamma in gammas]
    (ar_ids, ar_seconds), *speculative = timed_in_cycles(
        runs,
        cycles,
        lambda done, total, i: tick(done * len(gammas) // total, f"{names[i]} (run {done + 1} of {total})"),
    )
    # per gamma: PairedTimes(baseline ids, trace, the target alone's and its seconds, cycle by cycle)
    timed = [PairedTimes(ar_ids, trace, ar_seconds, seconds) for trace, seconds in speculative]
    tick(len(gammas), "measuring the cost ratio c")
    c = machine_cost_ratio(config, pair, prompt_ids + ar_ids[:1])
    tick(steps - 1, "the target's pass over k + 1 tokens, from the machine profile")
    blocks_of = [realised_blocks(run.second) for run in timed]
    verify_cost = quiet_verification_costs(pair, [k for blocks in blocks_of for k in blocks])
    rows = []
    for gamma, run, blocks in zip(gammas, timed, blocks_of):
        s = stats_of(run.second)
        same_length = s.new_tokens / max(1, len(run.first))  # the baseline's time scaled to the trace's tokens
        pair_speedups = [ratio * same_length for ratio in run.ratios]
        rows.append(
            dict(
                gamma=gamma,
                alpha=s.alpha_estimate,
                acceptance_rate=s.acceptance_rate,
                mean_block=sum(blocks) / max(1, len(blocks)),
                tokens_per_round=s.mean_tokens_per_round,
                expected_tokens_per_round=expected_tokens_for_blocks(s.alpha_estimate, blocks),
                speedup=run.first_median / run.second_median * same_length,
                speedup_low=min(pair_speedups),
                speedup_high=max(pair_speedups),
                expected_speedup=expected_speedup_for_blocks(s.alpha_estimate, blocks, c),
                expected_speedup_verify_measured=expected_speedup_for_blocks(s.alpha_estimate, blocks, c, verify_cost),
                verify_cost=sum(verify_cost[k] for k in blocks) / max(1, len(blocks)),
                target_passes=s.target_forward_passes,
                new_tokens=s.new_tokens,
                wall_s=run.second_median,
            )
        )
    tick(steps, f"done: {len(gammas)} block sizes")
    return pd.DataFrame(rows), c


READABLE = {
    "gamma": "γ",
    "alpha": "α",
    "acceptance_rate": "acceptance",
    "mean_block": "mean block",
    "tokens_per_round": "tokens per round",
    "expected_tokens_per_round": "tokens per round, theory",
    "speedup": "timed ratio",
    "speedup_low": "slowest pair",
    "speedup_high": "fastest pair",
    "expected_speedup": "theory, v = 1",
    "expected_speedup_verify_measured": "theory, v(k) here",
    "verify_cost": "v(k)",
    "target_passes": "target passes",
    "new_tokens": "new tokens",
    "wall_s": "seconds",
    "draft_vocab": "draft head size K",
    "cost_ratio": "c",
    "tokens_per_s": "tokens / s",
}


def readable(table: pd.DataFrame) -> pd.DataFrame:
    """The sweep's table as a reader wants it: named columns, two decimals (three for α); a γ sweep's rows say which
    timings measured the server's load (:func:`loaded_gammas`)."""
    shown = table.round({column: 3 if column in ("alpha", "acceptance_rate") else 2 for column in table.columns})
    if "speedup_low" in table.columns:
        loaded = loaded_gammas(table)
        shown["timing"] = ["under load" if gamma in loaded else "quiet" for gamma in table.gamma]
    return shown.rename(columns=READABLE)


def best_gamma_by(table: pd.DataFrame, column: str) -> int:
    """The swept block size with the highest ``column`` (a theoretical speedup)."""
    return int(table.loc[table[column].idxmax(), "gamma"])


def fastest_quiet_gamma(table: pd.DataFrame) -> int | None:
    """The swept block size whose timing gave the highest ratio among those that measured speculation, not the
    server's load (:func:`loaded_gammas`); None when every timing measured the load: a load-flagged timing is never
    a result."""
    quiet = table[~table.gamma.isin(loaded_gammas(table))]
    return best_gamma_by(quiet, "speedup") if len(quiet) else None


def gammas_tied_with(table: pd.DataFrame, gamma: int) -> list[int]:
    """The other block sizes whose fastest pair reaches ``gamma``'s slowest pair: measured on this machine
    they cannot be told apart from it (a tie, not a ranking)."""
    slowest = float(table.loc[table.gamma == gamma, "speedup_low"].iloc[0])
    return [int(row.gamma) for row in table.itertuples() if row.gamma != gamma and row.speedup_high >= slowest]


VOCAB_SIZES = (1024, 2048, 4096, 8192, 16384, 0)  # FR-Spec head sizes compared (0: the whole vocabulary)
HEAD_SIZE_TOKENS_MIN = 16  # new tokens per head size at least: enough drafted tokens for an estimate of alpha


def head_size_tokens(config: DecodeConfig, target_step_ms: float) -> int:
    """New tokens per head size compared: the config's, at most :data:`~specviz.limits.SWEEP_TOKENS_MAX` and as
    many as :data:`~specviz.limits.BUTTON_BUDGET_S` holds here, one decode per size (:data:`VOCAB_SIZES` and the
    shipped one)."""
    unit = decoding_seconds(len(VOCAB_SIZES) + 1, 1, target_step_ms)
    return units_in_budget(unit, HEAD_SIZE_TOKENS_MIN, min(config.max_new_tokens, SWEEP_TOKENS_MAX))


def vocab_sweep(
    config: DecodeConfig,
    pair: ModelPair,
    prompt_ids: list[int],
    sizes: Sequence[int] | None = None,
    on_progress: TextProgress | None = None,
) -> pd.DataFrame:
    """What the draft head's size K does (Zhao et al. 2025): c measured here, the rule's alpha on this
    prompt, and the theory's speedup at the config's gamma for each K (draft-model drafter only). By default
    the sizes are ``VOCAB_SIZES`` and the size the draft ships with."""
    tokens = head_size_tokens(config, model_profile(pair.target).step_ms)
    config = config.replace(max_new_tokens=tokens, drafter=DRAFT_MODEL)
    if sizes is None:
        shipped = pair.draft.vocab_ranking.recommended if pair.draft and pair.draft.vocab_ranking else 0
        sizes = sorted(set(VOCAB_SIZES) | {shipped}, key=lambda k: k or math.inf)
    rows = []
    for i, k in enumerate(sizes):
        if on_progress:
            on_progress(i, len(sizes), f"K = {k or 'all'} ({i + 1} of {len(sizes)})")
        sized = config.replace(draft_vocab=k)
        trace = speculative_decode(sized, prompt_ids=prompt_ids, pair=pair)
        c = cost_ratio(sized, pair, prompt_ids + trace.output_ids[:1])
        stats = stats_of(trace)
        alpha, blocks = stats.alpha_estimate, realised_blocks(trace)
        rows.append(
            dict(
                draft_vocab=k or pair.vocab_size,
                cost_ratio=c,
                alpha=alpha,
                tokens_per_round=stats.mean_tokens_per_round,
                expected_speedup=expected_speedup_for_blocks(alpha, blocks, c),
                tokens_per_s=stats.tokens_per_s,
            )
        )
    return pd.DataFrame(rows)


def load_signs_by_gamma(table: pd.DataFrame) -> dict[int, list[str]]:
    """Each swept block size whose live timing measured the machine's load, not speculation, with what showed it
    (:func:`load_signs` of its slowest and fastest pair, its measured speedup and Thm. 3.8's at v = 1)."""
    signs = {
        int(row.gamma): load_signs((row.speedup_low, row.speedup_high), row.speedup, row.expected_speedup)
        for row in table.itertuples()
    }
    return {gamma: said for gamma, said in signs.items() if said}


def loaded_gammas(table: pd.DataFrame) -> list[int]:
    """The swept block sizes whose live timing measured the machine's load (:func:`load_signs_by_gamma`)."""
    return list(load_signs_by_gamma(table))
