"""The race (live): the target alone and speculative decoding on one wall clock, measured on this machine.

Autoregressive decoding beside draft-and-verify (Leviathan et al. 2023; Chen et al. 2023), timed. A race runs both
on the same prompt, settings and
kernels, one after the other on the server's worker (never both at once on shared cores), and records when each
token was committed: the target alone through the engine's own autoregressive loop (:func:`autoregressive_decode`,
one forward per token), each speculative lane through its trace's rounds (``Round.ended_ms``; a verified block lands
at once). The lanes do the same recording work inside their clocks: every token a lane's target emits is recorded
alike (its text, probability and top tokens: :func:`~specviz.engine.records.emitted_token`), the target alone's as
it commits each token, a speculative lane's as each round ends; a speculative lane also records its drafted
positions (their p, q and top tokens), part of what drafting costs.
The browser replays those timestamps (:mod:`specviz.presentation.race`); the speedup is the ratio of the
two lanes' measured wall times, nothing predicted. Under greedy float32 the texts end identical (the speculative
output is the target's own, Leviathan et al. 2023, Thm. 3.1 with the argmax rule); in half precision identical up
to rounding, counted; under sampling the same seed gives another text (the speculative run draws its u's and the
draft's samples from the same stream), and what is preserved is the text's distribution.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from specviz import limits
from specviz.analysis import common
from specviz.analysis.metrics import profile_timeline
from specviz.analysis.paired import disagree
from specviz.analysis.roofline import draft_profile
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, autoregressive_decode, speculative_decode
from specviz.engine.token_texts import TokenTexts
from specviz.engine.trace import REJECTED, EmittedToken, Round
from specviz.models.pair import prompt_ids_for
from specviz.models.pass_timing import cpu_share, other_cores, thread_clock
from specviz.models.profile import PassProfile, measured_load, model_profile
from specviz.registry.drafters import DRAFTERS, drafter_entry
from specviz.registry.rules import rule_entry, rule_for
from specviz.runtime.machine import cpu_name
from specviz.runtime.protocol import common_prefix
from specviz.runtime.static_passes import GRAPHED
from specviz.server_reports.export import DraftingRun, drafting_run

TARGET_LANE = "target alone"
WARM_UP_TOKENS = 2  # each decoder's first tokens, run once before the clock starts (allocations, caches)


def warm_up_tokens(config: DecodeConfig, passes: str) -> int:
    """The untimed tokens each decoder runs before a race's clock starts, for a target whose passes run as ``passes``:
    :data:`WARM_UP_TOKENS` (the first allocations and caches), and on a GPU that captures its passes as CUDA graphs
    the run's own length, so every pass shape the lanes will use (the target's widths 1..γ + 1, the draft's steps,
    EAGLE's states) is captured before the clock, not inside a lane (each capture waits for the device and its
    warm-up run)."""
    return config.max_new_tokens if passes == GRAPHED else WARM_UP_TOKENS


@dataclass(frozen=True)
class Arrival:
    """One moment a lane's text grows: a token of the target alone, or a speculative round's verified block."""

    at_ms: float  # since the lane's decoding began
    tokens: tuple[str, ...]  # the texts that land, in order
    kinds: tuple[str, ...]  # per token: "target" (the target alone), "accepted", "correction" or "bonus"
    drafted: tuple[str, ...] = ()  # the round's drafted tokens, shown while the target verifies them
    struck: tuple[str, ...] = ()  # drafted tokens the target rejected (struck for a moment)
    drafted_at_ms: float | None = None  # when the draft was done and verification began
    draft_ms: float = 0.0
    verify_ms: float = 0.0


@dataclass(frozen=True)
class Lane:
    name: str
    arrivals: tuple[Arrival, ...]
    total_ms: float  # the lane's measured wall time, from its loop's start to its last token
    output_ids: tuple[int, ...]
    text: str
    slowdown: float | None  # its measured steps over this machine's quiet profile of them (1.0: as quiet as the
    # profile); None where that profile was measured busy (:func:`slowdown_over`)
    drafting: DraftingRun | None = None  # a speculative lane's rounds as vLLM counts them (its export)
    cpu_share: float = 1.0  # the decoding thread's share of a core while the lane ran (under LOADED: other work)
    other_cores: float | None = None  # the cores other processes kept busy while it ran (OTHER_WORK and above: load)

    @property
    def drafting_share(self) -> float:
        """The share of the lane's time spent drafting (0 for the target alone)."""
        return sum(arrival.draft_ms for arrival in self.arrivals) / self.total_ms if self.total_ms else 0.0


@dataclass(frozen=True)
class Race:
    lanes: tuple[Lane, ...]  # the target alone first
    agreements: tuple[str, ...]  # per lane after the first: how its text agrees with the target's own
    prompt: str
    pair: str  # "target ← draft"
    machine: str  # device, precision and CPU the lanes were timed on
    measured_at: str  # ISO time, UTC
    load: tuple[str, ...]  # signs the race measured the machine's load, in words (empty: quiet)

    def speedup(self, lane: Lane) -> float:
        """The target alone's wall time over ``lane``'s: the race's measured speedup, the figure the pages quote."""
        return self.lanes[0].total_ms / lane.total_ms

    @property
    def headline(self) -> float:
        return self.speedup(self.lanes[1])

    @property
    def noisy(self) -> bool:
        return bool(self.load)

    def summary(self) -> dict[str, object]:
        """The race as plain data (``python -m specviz race``): each lane's output ids, wall seconds and tokens per
        second, the headline speedup, whether the first speculative lane wrote the target's own ids, and the load
        signs (empty: quiet)."""
        target, speculative = self.lanes[0], self.lanes[1]
        return {
            "target_alone": lane_summary(target),
            "speculative": lane_summary(speculative),
            "speedup": self.headline,
            "identical": speculative.output_ids == target.output_ids,
            "agreement": self.agreements[0],
            "machine": self.machine,
            "load": list(self.load),
        }


def lane_summary(lane: Lane) -> dict[str, object]:
    wall_s = lane.total_ms / 1e3
    return {
        "name": lane.name,
        "output_ids": list(lane.output_ids),
        "wall_s": wall_s,
        "tokens_per_s": len(lane.output_ids) / wall_s if wall_s else 0.0,
    }


def target_lane(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int]) -> Lane:
    """The target alone, one token per forward, each token recorded as a round records a token the target emits (in
    its clock, as a speculative lane's rounds are) and its commit time kept."""
    times: list[tuple[EmittedToken, float]] = []  # each token's record (built inside the clock) and its time
    started = thread_clock()
    ids, seconds = autoregressive_decode(config, pair, prompt_ids, lambda record, ms: times.append((record, ms)))
    share, others = cpu_share(started), other_cores(started)
    texts = TokenTexts(pair.target.tokenizer).after(prompt_ids).sequence(ids)
    arrivals = tuple(Arrival(ms, (text,), ("target",)) for (_, ms), text in zip(times, texts))
    steps = [b.at_ms - a.at_ms for a, b in zip(arrivals, arrivals[1:])]  # the first includes the prompt's pass
    profile = model_profile(pair.target)
    slowdown = slowdown_over(sum(steps), len(steps) * profile.step_ms, profile)
    return Lane(
        TARGET_LANE, arrivals, seconds * 1e3, tuple(ids), "".join(texts), slowdown, cpu_share=share, other_cores=others
    )


def slowdown_over(measured_ms: float, predicted_ms: float, *profiles: PassProfile | None) -> float | None:
    """A lane's slowdown, measured / predicted ms of its steps (predicted from ``profiles``), or None where nothing was
    predicted or a profile was itself measured on a busy machine (:attr:`~specviz.models.profile.PassProfile.quiet`):
    against a slowed figure a quiet lane would look fast, and its race noisy."""
    quiet = all(profile is None or profile.quiet for profile in profiles)
    return measured_ms / predicted_ms if predicted_ms and quiet else None


def round_arrival(rnd: Round) -> Arrival:
    """A verified round lands at once: its accepted tokens, then the correction or the bonus."""
    accepted = rnd.accepted_count
    emitted_kind = "correction" if rnd.correction else "bonus" if rnd.bonus else "accepted"
    kinds = tuple("accepted" if i < accepted else emitted_kind for i in range(len(rnd.emitted_texts)))
    return Arrival(
        rnd.ended_ms,
        tuple(rnd.emitted_texts),
        kinds,
        tuple(pos.text for pos in rnd.draft),
        tuple(pos.text for pos in rnd.draft if pos.status == REJECTED),
        rnd.ended_ms - rnd.verify_ms,
        rnd.draft_ms,
        rnd.verify_ms,
    )


def speculative_lane(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int]) -> Lane:
    """A speculative run as a lane: one arrival per round, its steps compared with the machine's quiet profile."""
    started = thread_clock()
    trace = speculative_decode(config, prompt_ids=prompt_ids, pair=pair)
    share, others = cpu_share(started), other_cores(started)
    assert trace.stats is not None, "a decoded trace carries its stats"
    target, draft = model_profile(pair.target), draft_profile(trace.config, pair)
    drafts, passes = profile_timeline(trace, target, draft)
    later = trace.rounds[1:]  # the first round's pass includes the prompt's
    predicted = sum(drafts[1:]) + sum(passes[1:])
    measured = sum(r.draft_ms + r.target_pass_ms for r in later)
    return Lane(
        lane_name(config),
        tuple(round_arrival(r) for r in trace.rounds),
        trace.stats.wall_ms,
        tuple(trace.output_ids),
        trace.output_text,
        slowdown_over(measured, predicted, target, draft),
        drafting_run(trace),
        share,
        others,
    )


def race_machine(config: DecodeConfig, pair: ModelPair) -> str:
    """The device, precision and CPU a race's lanes are timed on, in words."""
    return f"{pair.target.device} {config.dtype} · {cpu_name()}"


def lane_name(config: DecodeConfig) -> str:
    entry = drafter_entry(config.drafter)
    size = f"depth {config.tree_depth}" if entry.drafts_tree(config) else f"γ = {config.gamma}"
    return f"speculative: {entry.label}, {size}"


def load_signs(lanes: tuple[Lane, ...]) -> tuple[str, ...]:
    """Why a race measured the machine's load rather than the method, in words (empty: no sign of load).

    Three signs. Other processes kept ``OTHER_WORK`` cores or more busy while a lane ran, as the OS counts them
    (:func:`~specviz.models.pass_timing.other_cores`). A lane whose decoding thread had less than ``LOADED`` of a core
    (:func:`~specviz.models.pass_timing.cpu_share`) waited for other work, even a load constant through the whole race
    (which slows every lane alike). And each lane's steps are compared with this machine's quiet profile of the same
    passes (its ``slowdown``); the loop's own work (probabilities, records) adds about the same share to every lane,
    so on a quiet machine the lanes agree (:func:`~specviz.analysis.paired.disagree`). When they do not, other work
    shared the cores during one, and the ratio of their wall times measures that work as much as speculation (lanes
    without a quiet profile to compare with are left out of that comparison: :func:`slowdown_over`)."""
    signs = tuple(
        f"while {lane.name} ran, {said}"
        for lane in lanes
        for said in measured_load(other_cores=lane.other_cores, cpu_share=lane.cpu_share)  # one run: no spread
    )
    slowed = {lane.name: lane.slowdown for lane in lanes if lane.slowdown is not None}
    if not disagree(list(slowed.values())):
        return signs
    fastest, slowest = min(slowed, key=slowed.__getitem__), max(slowed, key=slowed.__getitem__)
    return (
        *signs,
        f"{slowest} ran at {slowed[slowest]:.2f}× this machine's quiet steps and {fastest} at {slowed[fastest]:.2f}×: "
        "other work shared the cores during one of them",
    )


def run_race(
    lanes: list[tuple[DecodeConfig, ModelPair]], prompt: str | None, prompt_ids: list[int] | None = None
) -> Race:
    """The target alone against each (config, pair) lane, on ``prompt`` (or raw ``prompt_ids``), one after the
    other on this worker.

    Every decoder first runs :func:`warm_up_tokens` tokens untimed, so neither lane pays the process's first
    allocations (nor, on a GPU, a graph's capture). The target alone runs with the first lane's config and pair (same
    target, kernels and rule).
    """
    config, pair = lanes[0]
    ids = warmed_prompt_ids(config, pair, prompt, prompt_ids)
    for lane_config, lane_pair in lanes:
        warm = warm_up_tokens(lane_config, lane_pair.target.passes)
        speculative_decode(lane_config.replace(max_new_tokens=warm), prompt_ids=ids, pair=lane_pair)
    target = target_lane(config, pair, ids)
    raced = [speculative_lane(c, p, ids) for c, p in lanes]
    everything = (target, *raced)
    return Race(
        everything,
        tuple(agreement(c, target.output_ids, lane.output_ids) for (c, _), lane in zip(lanes, raced)),
        prompt if prompt is not None else "".join(TokenTexts(pair.target.tokenizer).sequence(ids)),
        f"{pair.target.name} ← {pair.draft.name if pair.draft else config.drafter}",
        race_machine(config, pair),
        datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        load_signs(everything),
    )


def warmed_prompt_ids(
    config: DecodeConfig, pair: ModelPair, prompt: str | None, prompt_ids: list[int] | None
) -> list[int]:
    """The race's prompt as ids, after the target alone's warm-up (:func:`warm_up_tokens` untimed tokens)."""
    ids = prompt_ids_for(pair, config, prompt, prompt_ids)
    autoregressive_decode(config.replace(max_new_tokens=warm_up_tokens(config, pair.target.passes)), pair, ids)
    return ids


def target_alone_summary(
    config: DecodeConfig, pair: ModelPair, prompt: str | None, prompt_ids: list[int] | None = None
) -> dict[str, object]:
    """The target alone's lane as :meth:`Race.summary` words it, with no speculative lane (``speculative`` None):
    what ``python -m specviz race --fastest`` measures where no draft pays for the pair here."""
    target = target_lane(config, pair, warmed_prompt_ids(config, pair, prompt, prompt_ids))
    load = load_signs((target,))
    return {
        "target_alone": lane_summary(target),
        "speculative": None,
        "machine": race_machine(config, pair),
        "load": list(load),
    }


def estimated_seconds(tokens: int, target_step_ms: float, lanes: int) -> float:
    """What a race costs before it runs, from the machine profile: the target alone's ``tokens`` steps, each
    speculative lane at most as long, and each decoder's warm-up."""
    return common.decoding_seconds(1 + lanes, tokens + WARM_UP_TOKENS * (1 + lanes), target_step_ms)


def lane_choices(config: DecodeConfig) -> tuple[str, ...]:
    """The drafters that can race beside the sidebar's on this pair: every other one, except those that need a
    draft model when none is named, and those drafting on the target's states, whose shipped weights were trained
    for the embedded target only."""
    return tuple(
        name
        for name, entry in DRAFTERS.items()
        if name != config.drafter
        and (entry.draft_model != "always" or config.draft)
        and limits.shipped_weights_fit(entry.requires_model_outputs, config.target, config.parallel_weights)
    )


EXACT_PRECISIONS = {
    "float32": "as greedy decoding in float32 guarantees",
    "int8": "to the int8 target as run (a coarser model than the float32 one), as its exact int32 sums and its "
    "attention one row at a time guarantee",
    "int4": "to the int4 target as run (a coarser model than the float32 one), as its kernel's exact int32 sums, "
    "each row's float steps in one order, and its attention one row at a time guarantee",
}


def agreement(config: DecodeConfig, reference: tuple[int, ...], ids: tuple[int, ...]) -> str:
    """How a speculative lane's text compares with the target alone's, and what the rule and precision promise:
    identical under greedy float32 (Leviathan et al. 2023, Thm. 3.1 with the argmax rule) and to the quantised target
    as run in int8 and int4 (each row's products are computed as alone, :mod:`specviz.runtime.cpu.int8`,
    :mod:`specviz.runtime.cpu.int4`, and each row attends as one token would, :mod:`specviz.runtime.cpu.row_attention`),
    identical up to rounding in half precision, the same distribution,
    not the same text, under sampling, and no promise under a lossy rule."""
    same, total = common_prefix(reference, ids), max(len(reference), len(ids))
    if rule_for(config).stochastic:
        return (
            "Sampling: the same seed gives another text, because the speculative run draws its acceptance tests "
            "and the draft's tokens from the same random stream; what it preserves is the distribution of the text "
            "(the Losslessness lab tests it)."
        )
    if not rule_entry(config.rule).lossless:
        return f"A lossy rule: {same} of {total} tokens match the target's own output."
    if same == total and config.dtype in EXACT_PRECISIONS:
        return f"Identical: {same} of {total} tokens, {EXACT_PRECISIONS[config.dtype]}."
    if config.dtype not in EXACT_PRECISIONS:
        return (
            f"Identical up to rounding: {same} of {total} tokens match (in {config.dtype} a pass over several "
            "tokens rounds differently from a one-token step, so a near tie can flip)."
        )
    return f"{same} of {total} tokens identical: greedy {config.dtype} should match every token."
