"""Metrics of one trace (the Metrics and theory page). Pure data in, plain data (pandas) out; no streamlit."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TypeVar

import pandas as pd

from specviz.analysis import paired
from specviz.analysis.common import stats_of
from specviz.analysis.cost import machine_cost_ratio, quiet_verification_costs
from specviz.analysis.paired import timed_in_alternating_pairs
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, autoregressive_decode, speculative_decode
from specviz.engine.trace import NOT_VERIFIED, Trace
from specviz.models.pass_timing import other_cores, thread_clock
from specviz.models.profile import PassProfile
from specviz.rules.theory import expected_speedup_for_blocks, expected_tokens_for_blocks

A = TypeVar("A")
B = TypeVar("B")


def acceptance_by_position(trace: Trace) -> pd.DataFrame:
    """Per drafted position i (1-based), as vLLM reports acceptance:
    ``acceptance_rate`` = accepted_i / verified_i, conditional on tokens 1..i-1 accepted;
    ``accepted_per_draft`` = accepted_i / rounds that drafted at least i tokens (vLLM's per-position rate)."""
    verified, accepted, drafted = Counter[int](), Counter[int](), Counter[int]()
    for r in trace.rounds:
        drafted.update(range(1, len(r.draft) + 1))
        for pos in r.draft:
            if pos.status != NOT_VERIFIED:
                verified[pos.index + 1] += 1
                accepted[pos.index + 1] += pos.accepted
    positions = sorted(verified)
    return pd.DataFrame(
        {
            "position": positions,
            "verified": [verified[i] for i in positions],
            "accepted": [accepted[i] for i in positions],
            "acceptance_rate": [accepted[i] / verified[i] for i in positions],
            "accepted_per_draft": [accepted[i] / drafted[i] for i in positions],
        }
    )


def pooled_acceptance_by_position(traces: list[Trace]) -> pd.DataFrame:
    """:func:`acceptance_by_position` over several traces: verified and accepted summed per position, the
    acceptance rate recomputed from the sums."""
    merged = (
        pd.concat([acceptance_by_position(t) for t in traces])
        .groupby("position")[["verified", "accepted"]]
        .sum()
        .reset_index()
    )
    merged["acceptance_rate"] = merged.accepted / merged.verified
    return merged


def tokens_per_round(trace: Trace) -> pd.DataFrame:
    """Histogram of tokens emitted per round."""
    counts = Counter(len(r.emitted_ids) for r in trace.rounds)
    sizes = list(range(1, max(counts, default=1) + 1))
    return pd.DataFrame({"tokens": sizes, "rounds": [counts.get(k, 0) for k in sizes]})


def accepted_lengths(trace: Trace) -> pd.DataFrame:
    """This request's histogram of accepted drafted tokens per drafting round (0 .. the largest block)."""
    counts = Counter(r.accepted_count for r in trace.rounds if r.drafted_count)
    largest = max((len(r.draft) for r in trace.rounds), default=0)
    return pd.DataFrame(
        {"accepted": list(range(largest + 1)), "rounds": [counts.get(k, 0) for k in range(largest + 1)]}
    )


def realised_blocks(trace: Trace) -> list[int]:
    """Tokens each round drafted in a chain (trees: their depth, the longest path a round can accept)."""
    return [r.realised_block for r in trace.rounds]


@dataclass(frozen=True)
class TheoryCheck:
    alpha: float  # mean over verified positions of the rule's own alpha (its registry entry's alpha)
    mean_block: float  # mean realised block size k_r
    measured_tokens_per_round: float
    expected_tokens_per_round: float  # Eq. 1 averaged over the realised blocks
    mean_acceptance_length: float  # vLLM: 1 + accepted per drafting round
    target_passes: int
    autoregressive_passes: int
    blocks: tuple[int, ...]


def theory_check(trace: Trace) -> TheoryCheck:
    """Measured mean tokens per round next to (1 - alpha^(k_r+1)) / (1 - alpha) at each realised k_r."""
    stats, blocks = stats_of(trace), realised_blocks(trace)
    alpha = stats.alpha_estimate
    return TheoryCheck(
        alpha,
        sum(blocks) / max(1, len(blocks)),
        stats.mean_tokens_per_round,
        expected_tokens_for_blocks(alpha, blocks),
        stats.mean_acceptance_length,
        stats.target_forward_passes,
        stats.autoregressive_forward_passes,
        tuple(blocks),
    )


def two_counts_reconciled(trace: Trace) -> str:
    """Why vLLM's acceptance length and the tokens per round differ, in words, from the trace's own rounds: the first
    counts 1 + accepted drafts over the rounds that drafted, the second the tokens emitted over every round; they part
    by the rounds that drafted nothing and by the accepted or bonus tokens cut where the output ended."""
    stats, drafting = stats_of(trace), [r for r in trace.rounds if r.drafted_count]
    counted = len(drafting) + sum(r.accepted_count for r in drafting)
    cut = counted - sum(len(r.emitted_ids) for r in drafting)
    idle = len(trace.rounds) - len(drafting)
    return (
        f"Acceptance length {stats.mean_acceptance_length:.2f} = (drafting rounds + accepted drafts) / drafting "
        f"rounds = {counted} / {len(drafting)}; tokens per round {stats.mean_tokens_per_round:.2f} = new tokens / "
        f"rounds = {stats.new_tokens} / {len(trace.rounds)}. They part by {idle} round{'s' * (idle != 1)} that "
        f"drafted nothing (one token each, counted only in the second) and {cut} accepted or bonus "
        f"token{'s' * (cut != 1)} cut where the output ended ({stats.stop_reason.replace('_', ' ')}; counted only "
        "in the first)."
    )


@dataclass(frozen=True)
class SpeedupCheck:
    speculative_s: float
    autoregressive_s: float
    cost_ratio: float  # c from the machine profile (timed now for drafters without a forward of their own)
    expected: float  # the theory at the trace's alpha, realised blocks and c (verification = one target step)
    expected_verify_measured: float  # the same with the profile's cost v(k) of the target's pass over k + 1 tokens
    # each back-to-back pair's own autoregressive / speculative ratio, in pair order
    pair_speedups: tuple[float, ...] = ()
    other_cores: float | None = None  # the cores other processes kept busy while the pairs ran (None: not read)

    @property
    def measured(self) -> float:
        return self.autoregressive_s / self.speculative_s


def timed_trace(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int]) -> tuple[Trace, float]:
    """(trace, seconds): one speculative decoding run, every round recorded, as the app makes it."""
    trace = speculative_decode(config, prompt_ids=prompt_ids, pair=pair)
    return trace, stats_of(trace).wall_ms / 1e3


def machine_speedup(trace: Trace, pair: ModelPair) -> tuple[float, float]:
    """(c, the run's speedup on this machine): the theory at the trace's alpha and realised blocks, predicted with the
    machine profile's c and v(k), the one speed figure every speed page shows."""
    c = machine_cost_ratio(trace.config, pair, trace.prompt_ids + trace.output_ids[:1])
    blocks = realised_blocks(trace)
    return c, expected_speedup_for_blocks(
        stats_of(trace).alpha_estimate, blocks, c, quiet_verification_costs(pair, blocks)
    )


TIMED_PAIRS = 3  # the live check's alternating pairs of (target alone, speculative)


def measured_speedup(trace: Trace, pair: ModelPair, pairs: int = TIMED_PAIRS, attempts: int = 1) -> SpeedupCheck:
    """The target alone against the trace's speculative decoding (same target, prompt and length, this
    process), both timed now in ``pairs`` back-to-back pairs whose order alternates, each side reported
    as its median; with the theory's speedup at the trace's alpha, realised blocks and the profile's c.

    The trace's own wall time is not reused: a stored trace was timed whenever, and under whatever load,
    it was computed (another session's request), and a ratio of two times taken minutes apart on a
    shared machine measures the load, not the method. A timing that shows :func:`load_signs` is taken
    again, up to ``attempts`` times (one by default: the page's "Measure again" takes another, and keeps the
    quiet one for later visitors, :func:`~specviz.serving.pool.shown_attempt`).
    """
    config = trace.config.replace(max_new_tokens=max(1, len(trace.output_ids)))
    c, predicted = machine_speedup(trace, pair)
    expected = expected_speedup_for_blocks(stats_of(trace).alpha_estimate, realised_blocks(trace), c)
    for _ in range(attempts):
        started = thread_clock()
        timed = timed_in_alternating_pairs(
            lambda: autoregressive_decode(config, pair, trace.prompt_ids),
            lambda: timed_trace(trace.config, pair, trace.prompt_ids),
            pairs,
        )
        check = SpeedupCheck(
            timed.second_median, timed.first_median, c, expected, predicted, tuple(timed.ratios), other_cores(started)
        )
        if not load_signs(check):
            break
    return check


def load_signs(check: SpeedupCheck) -> list[str]:
    """Why ``check`` measured the server's load rather than speculation (:func:`specviz.analysis.paired.load_signs`)."""
    return paired.load_signs(check.pair_speedups, check.measured, check.expected, check.other_cores)


def profile_timeline(trace: Trace, target: PassProfile, draft: PassProfile | None) -> tuple[list[float], list[float]]:
    """Each round's draft and verification ms as this machine's profile predicts them (the same quiet figures on every
    page, not the load a stored trace was computed under): a chain's k draft steps and the target's pass over k + 1
    tokens; a drafter without a forward of its own keeps the draft time its trace recorded."""
    blocks = realised_blocks(trace)
    drafts = [k * draft.step_ms if draft else r.draft_ms for k, r in zip(blocks, trace.rounds)]
    return drafts, [target.pass_cost_ms(len(r.draft) + 1) for r in trace.rounds]
