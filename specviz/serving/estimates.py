"""How long a session waits for shared work, and a lecture's preparation for its plan (pure: the pool's or the
preparation's state in, seconds out).

A job's expected run is its estimate from the machine profile (below: :func:`work_seconds`) or, without
one, its label's mean over recent runs; a queued newcomer waits for the jobs ahead of it to free a slot (each running
one's remaining time, each queued one's expected run), then for its own expected run.

A preparation's works run one after the other; what is left of it is their estimates scaled by the machine's pace
(:func:`pace`: what the finished ones took over what they were estimated at), the running one's less the time it has
run (:func:`plan_left`).

What each work costs before it runs, estimated from the machine profile: ``(config, params, the target's one-token
step in ms) -> seconds``, at most (a speculative decode costs no more than the target alone's where speculation
pays; :func:`~specviz.analysis.common.decoding_seconds`). A button says it before it is pressed, and a waiting page
starts its estimate from it. Loading the models is not in it: a work that loads
other pairs says so (``WorkEntry.loads_pairs``). Reading the prompt comes on top, once (:func:`prompt_seconds`): a
long prompt is what makes a trace long.
"""

from __future__ import annotations

from typing import Any

from specviz.analysis import lab_sequences, numerics, race, sweep
from specviz.analysis.common import decoding_seconds
from specviz.analysis.drafters import compared_seconds, compared_tokens
from specviz.analysis.metrics import TIMED_PAIRS
from specviz.analysis.rules import beta_values
from specviz.config import DecodeConfig
from specviz.models.profile import PassProfile
from specviz.registry.drafters import drafter_entry
from specviz.serving.jobs import Job

WIDE_ROUND_STEPS = 2  # a pass over a tree or a 16-token chain, and its drafting, for a few tokens a round
RUNS_KEPT = 20  # recent run times kept per label
RUNNING_LEFT_S = 5.0  # the least a running work is said to have left: running, it is not done


def record_run(durations: dict[str, list[float]], label: str, seconds: float) -> None:
    """Keep a finished run's seconds among its label's :data:`RUNS_KEPT` latest."""
    durations.setdefault(label, []).append(seconds)
    del durations[label][:-RUNS_KEPT]


def mean_run(durations: dict[str, list[float]], label: str) -> float | None:
    """The mean of a label's recent runs, None before its first."""
    runs = durations.get(label)
    return sum(runs) / len(runs) if runs else None


def expected_run(job: Job, durations: dict[str, list[float]]) -> float | None:
    """A job's run before it shows progress: its estimate when it has one, else its label's mean run."""
    return job.estimated_s if job.estimated_s is not None else mean_run(durations, job.label)


TRUSTED_SHARE = 0.25  # a run this far along trusts its own pace alone: the machine's speed now, not the estimate


def remaining_seconds(job: Job, expected: float | None, now: float) -> float | None:
    """Seconds until a job's result. Before it shows progress: its ``expected`` run less the time it has run. Once
    it has: its own pace (seconds a step since its first step, so a slow first step, a load or a warm-up, does not
    multiply it; before a second step, elapsed over the share done) times the steps left, weighed against the
    estimate's own share of what is left until :data:`TRUSTED_SHARE` of the run is done, then alone: the figure moves
    with the machine (a run twice as slow as estimated says so), never stuck at an estimate it has overrun; None while
    neither is known."""
    done, total, _ = job.progress
    elapsed = now - job.started if job.started is not None else 0.0
    if job.started is None or not 0 < done < total:
        return None if expected is None else max(0.0, expected - elapsed)
    paced = job.first_step is not None and done > job.first_step[1]
    if paced and job.first_step is not None:
        since, first = job.first_step
        measured, weight = (now - since) / (done - first) * (total - done), min(1.0, done / total / TRUSTED_SHARE)
    else:
        measured, weight = elapsed * (total - done) / done, done / total
    if expected is None:
        return measured
    return weight * measured + (1 - weight) * expected * (total - done) / total


def queue_wait(remaining: list[float], workers: int) -> float:
    """Seconds until a slot frees for a newcomer when jobs with these remaining times go first, in order."""
    slots = [0.0] * workers
    for seconds in remaining:
        slots[slots.index(min(slots))] += seconds
    return min(slots)


def pace(finished: list[tuple[float, float]], running: tuple[float, float] | None = None) -> float:
    """How many times its estimate a work takes on this machine now: the seconds the ``finished`` works took over the
    seconds they were estimated at (each ``(estimate, took)``; 1 before any: the estimate is all there is). A
    ``running`` work (``(estimate, elapsed)``) counts as if it ended now once that says slower: a run already past its
    estimate is evidence before it ends (a busy machine shows it on the first work, not after it)."""
    estimated, took = sum(e for e, _ in finished), sum(t for _, t in finished)
    ratio = took / estimated if estimated > 0 else 1.0
    if running is None or estimated + running[0] <= 0:
        return ratio
    return max(ratio, (took + running[1]) / (estimated + running[0]))


def plan_left(running: tuple[float, float] | None, waiting: list[float], finished: list[tuple[float, float]]) -> float:
    """Seconds until a plan's works are done: the ``running`` one's (``(estimate, elapsed)``) paced estimate less the
    time it has run, never under :data:`RUNNING_LEFT_S`, then each ``waiting`` one's paced estimate (:func:`pace` over
    the ``finished`` works' ``(estimate, took)``). The figure counts down while a work runs and moves to the machine's
    measured pace as works end."""
    scale = pace(finished, running)
    now = 0.0 if running is None else max(RUNNING_LEFT_S, scale * running[0] - running[1])
    return now + scale * sum(waiting)


def prompt_seconds(tokens: int, target: PassProfile) -> float:
    """The target's pass over a prompt of ``tokens`` tokens, estimated from its profile: each token at its share of the
    widest pass the profile measured, T(9) / 9 (a long prompt is read in wide passes, which a CPU's few cores make
    compute-bound: the cost per token falls little past a few tokens)."""
    return tokens * target.pass_ms[-1] / len(target.pass_ms) / 1e3


def trace(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """One decode; a round that verifies a tree costs up to :data:`WIDE_ROUND_STEPS` target steps a token."""
    wide = WIDE_ROUND_STEPS if drafter_entry(config.drafter).drafts_tree(config) else 1
    return wide * decoding_seconds(1, config.max_new_tokens, step_ms)


def live_timing(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """The trace, then the target alone and speculative decoding in :data:`TIMED_PAIRS` alternating pairs."""
    return decoding_seconds(1 + 2 * TIMED_PAIRS, config.max_new_tokens, step_ms)


def raced(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    (lanes,) = params
    return race.estimated_seconds(config.max_new_tokens, step_ms, 1 + len(lanes))


def swept(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    (gammas,) = params
    return sweep.planned_sweep_seconds(config, len(gammas), step_ms)


def head_sizes(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """One decode per head size compared (:data:`~specviz.analysis.sweep.VOCAB_SIZES` and the shipped one)."""
    return decoding_seconds(len(sweep.VOCAB_SIZES) + 1, sweep.head_size_tokens(config, step_ms), step_ms)


def departures(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """The target's greedy reference, then one decode per β compared."""
    return decoding_seconds(1 + len(beta_values()), config.max_new_tokens, step_ms)


def first_position(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """The target's and the drafter's pass at the prompt, once for each part's draft (the lab's two parts)."""
    return decoding_seconds(2, 2, step_ms)


def sequences(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """The lab's decodes (None decodes per arm: as many as the power target needs, at most the slider's most)."""
    samples, tokens = params
    return lab_sequences.sequence_seconds(samples or lab_sequences.SEQUENCE_SAMPLES_MAX, tokens, step_ms)


def each_precision(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """The target alone and speculative decoding in each precision."""
    (runs,) = params
    return decoding_seconds(2 * len(runs), config.max_new_tokens, step_ms)


def presets(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """The target alone and speculative decoding on each preset decoded (as many as fit the budget here)."""
    (named,) = params
    return decoding_seconds(2 * numerics.presets_fitting(len(named), config, step_ms), config.max_new_tokens, step_ms)


def draft_precisions(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """The target alone once, then one speculative decode per draft precision."""
    (dtypes,) = params
    return decoding_seconds(1 + len(dtypes), config.max_new_tokens, step_ms)


def verification_timing(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """The trace, then per repeat one pass over γ + 1 tokens and γ + 1 one-token passes (a pass over a few tokens
    costs about one step while memory-bound), each side warmed up once."""
    (repeats,) = params
    return trace(config, params, step_ms) + decoding_seconds(repeats + 1, config.gamma + 2, step_ms)


def drafters(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """:func:`~specviz.analysis.drafters.compared_seconds` at the tokens the comparison runs here."""
    kinds, presets = params
    tokens = compared_tokens(config, len(kinds), len(presets), step_ms)
    return compared_seconds(len(kinds), len(presets), tokens, step_ms)


def tree_against_chain(config: DecodeConfig, params: tuple[Any, ...], step_ms: float) -> float:
    """The tree and two chains, one as deep as the tree and one as long as its budget: a round that verifies a tree or
    a chain that long costs up to :data:`WIDE_ROUND_STEPS` target steps a token."""
    return WIDE_ROUND_STEPS * decoding_seconds(3, config.max_new_tokens, step_ms)
