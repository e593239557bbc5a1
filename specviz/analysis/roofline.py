"""Why speculation pays (or not) on this machine: the measured pass costs against the block size, beside the roofline.

A decoding pass over n tokens reads every weight once and does 2 N n FLOPs (N parameters). Its time is at least
the larger of the memory bound, weight bytes / bandwidth, flat in n, and the compute bound, 2 N n / FLOP rate,
growing with n (the roofline model, Williams et al. 2009). While the memory bound is the larger, a pass over
k + 1 tokens costs about one token's step: v(k) ~ 1, verification is nearly free (Leviathan et al. 2023, Sec. 3.4
and 4), and the best block size is large. The measured curve shows where this machine's kernels leave that.

Pure data in, plain data out; no streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import pandas as pd

from specviz.config import DecodeConfig
from specviz.drafters.modules import draft_source
from specviz.engine import ModelPair
from specviz.models.kernels import INT4, INT8, ONEDNN, QUANTISED
from specviz.models.machine import matrix_units_in_words
from specviz.models.profile import FLAT, PassProfile, model_profile, pass_profile
from specviz.models.rates import MachineRates
from specviz.rules.theory import expected_speedup

EXITS = (0.0, 0.6, 0.7, 0.8, 0.9)  # the confidence exits priced beside every γ (0: always γ tokens)

KERNEL_WORDS = {
    ONEDNN: "oneDNN's kernels on packed weights",
    "default": "torch's default kernels",
    INT8: "int8 products summed in int32",
    INT4: "the package's int4 kernel (int8 activations, int32 sums)",
}


def kernel_words(profile: PassProfile) -> str:
    """The precision and kernels a profile was measured on, in words (a quantised model's own precision, not its
    float32 norms')."""
    precision = profile.kernels if profile.kernels in QUANTISED else profile.dtype
    return f"{precision} on {KERNEL_WORDS.get(profile.kernels, profile.kernels)}"


def draft_profile(config: DecodeConfig, pair: ModelPair) -> PassProfile | None:
    """The drafter's own forward (its model, its lean body, its trimmed head) measured as the target's is, or None
    for a drafter without an autoregressive draft (n-gram lookup, drafters on the target's states). The profile is
    the forward's (:func:`~specviz.models.profile.forward_name`), whatever else the drafter's settings hold: the
    one every page and ``python -m specviz machine`` read (the oracle's is the target's own)."""
    source = draft_source(config, pair)
    return None if source is None else pass_profile(*source)


def speed_sentence(profile: PassProfile) -> str:
    """What this machine makes of a pass over k + 1 tokens, in words, from its measured profile."""
    costs = profile.verify_costs
    flat = profile.flat_until()
    shape = (
        f"flat (at most {FLAT} steps) up to k = {flat}"
        if flat == max(costs)
        else f"flat up to k = {flat}, then growing"
        if flat
        else "growing with k: a large block loses here"
    )
    return (
        f"Measured on this machine ({profile.cpu}; {matrix_units_in_words()}): the target's one-token step takes "
        f"{profile.step_ms:.1f} ms in {kernel_words(profile)} "
        f"({profile.bandwidth_gbs:.1f} GB/s of weights), and its pass over k + 1 tokens costs v(k) = "
        f"{', '.join(f'{v:.2f}' for v in costs.values())} one-token steps for k = 1..{max(costs)}: {shape}."
        + below_one_sentence(costs)
        + busy_sentence(profile)
    )


def busy_sentence(profile: PassProfile) -> str:
    """What a profile measured on a busy machine is (empty for a quiet one, the machine's): the least loaded figure so
    far, not this machine's quiet cost, measured again until a quiet one replaces it
    (:func:`~specviz.models.profile.pass_profile`)."""
    if profile.quiet:
        return ""
    return (
        f" Measured while other work held the cores (the timing thread had {profile.cpu_share:.0%} of a core; its "
        f"rounds {profile.spread:.2f}× apart): not this machine's quiet cost, and measured again until a quiet "
        "measurement replaces it."
    )


def below_one_sentence(costs: dict[int, float]) -> str:
    """What a v(k) below 1 means, in words (empty where none is): a pass over k + 1 tokens measured cheaper than
    the one-token step, which the roofline says cannot be (the same weights read, more arithmetic) unless the
    kernel for a single row is slower than the one for several, as it is on some CPUs' matrix libraries."""
    cheaper = [k for k, v in costs.items() if v < 1]
    if not cheaper:
        return ""
    return (
        f" v(k) below 1 (k = {', '.join(map(str, cheaper))}): a pass over k + 1 tokens measured cheaper than over one "
        "token. On this machine the one-row kernel is slower than the batched one, so the one-token step, not the "
        "wider pass, is the slow case; the theory priced with v(k) takes that as measured."
    )


def roofline_table(target: PassProfile, draft: PassProfile | None, rates: MachineRates) -> pd.DataFrame:
    """Per pass size n = k + 1 = 1..9: the target's (and draft's) measured ms beside the target's memory and
    compute bounds, and v(k) = T(k + 1) / T(1)."""
    element = 2 if target.dtype in ("bfloat16", "float16") else 4
    parameters = target.weight_bytes // element
    rows = []
    for n, ms in enumerate(target.pass_ms, start=1):
        memory = rates.memory_bound_ms(target.weight_bytes)
        compute = rates.compute_bound_ms(parameters, n, target.dtype) if target.dtype in rates.gflops else 0.0
        rows.append(
            dict(
                tokens=n,
                k=n - 1,
                target_ms=ms,
                memory_bound_ms=memory,
                compute_bound_ms=compute,
                roofline_ms=max(memory, compute),
                verify_cost=ms / target.step_ms,
                draft_ms=draft.pass_ms[n - 1] if draft else None,
            )
        )
    return pd.DataFrame(rows)


def cost_coefficient(target: PassProfile, draft: PassProfile) -> float:
    """c = T_draft(1) / T_target(1): the draft's one-token step over the target's, from their quiet profiles (the cost
    coefficient of Leviathan et al. 2023, Sec. 3.1; with v(k), what Thm. 3.8 prices a block at here)."""
    return draft.step_ms / target.step_ms


def best_priced_gamma(alpha: float, c: float, profile: PassProfile) -> int:
    """The block size, among those the profile measured (1..8), with the highest speedup of Thm. 3.8 priced at this
    machine's v(k) (:func:`~specviz.rules.theory.expected_speedup`)."""
    return max(profile.verify_costs, key=lambda k: expected_speedup(alpha, k, c, profile.verify_cost(k)))


def speculation_summary(alpha: float, c: float, profile: PassProfile) -> str:
    """What the roofline means for speculation here at a measured alpha and c: the block size the theory picks at
    that one alpha, said to be that (the Gamma sweep's picks come from each block size's own runs)."""
    gamma = best_priced_gamma(alpha, c, profile)
    return (
        f"The theory at this trace's α = {alpha:.2f} and c = {c:.3f}, priced at this machine's v(k), is best at "
        f"γ = {gamma} ({expected_speedup(alpha, gamma, c, profile.verify_cost(gamma)):.2f}× over the target alone, "
        f"full blocks); v(k) stays flat (≤ {FLAT}) up to k = {profile.flat_until()}. A prediction at one α for every "
        "γ: the Gamma sweep decodes each γ, whose own α and clipped last rounds may pick another γ."
    )


def pair_profiles(config: DecodeConfig, pair: ModelPair) -> tuple[PassProfile, PassProfile | None]:
    """The target's profile on its kernel path and the drafter's (None where it has no forward of its own)."""
    return model_profile(pair.target), draft_profile(config, pair)


PAYS = 1.2  # a priced speedup from which speculation visibly pays in a class


class FastestDraft(NamedTuple):
    """A target precision's fastest draft here: its precision, γ, the speedup it is priced at over the target alone,
    the tokens a second that prices (the speedup over the target's own step), and the confidence exit that pays
    (0: always γ tokens; :class:`~specviz.drafters.base.ConfidenceExit`)."""

    draft_dtype: str
    gamma: int
    speedup: float
    tokens_per_s: float
    confidence_exit: float


@dataclass(frozen=True)
class MeasuredDefaults:
    """A pair's default precision, block size and draft precision on this machine, and why, from its profiles;
    ``fastest``: for each target precision, the draft (:class:`FastestDraft`) whose replayed rounds are fastest
    there (``--fastest``)."""

    dtype: str
    gamma: int
    reason: str
    draft_dtype: str | None = None  # None: the target's
    fastest: dict[str, FastestDraft] = field(default_factory=dict)
    confidence_exit: float = 0.0  # the draft's confidence exit (0: γ tokens a round, as the lesson drafts)
    busy: bool = False  # chosen from a profile measured while other work held the cores (measured again later)

    def __post_init__(self) -> None:  # a stored file gives lists: read back as the tuples they were
        fastest = {
            k: FastestDraft(str(d), int(g), float(x), float(t), float(e)) for k, (d, g, x, t, e) in self.fastest.items()
        }
        object.__setattr__(self, "fastest", fastest)


@dataclass(frozen=True)
class DraftReplay:
    """The draft read along the target's own greedy text, fed the target's tokens (one pass a held-out prompt): for
    each continuation, at each position, whether the draft's greedy token there is the target's (``agreed``) and
    the draft's confidence max q there (``confidence``). A greedy round is a function of these: from the last
    committed position it drafts until γ tokens or the first unsure one (that one still drafted), and accepts up to
    the first disagreement, for an accepted prefix is the target's own text."""

    agreed: tuple[tuple[bool, ...], ...]
    confidence: tuple[tuple[float, ...], ...]

    @property
    def alpha(self) -> float:
        """The draft's greedy acceptance α: how often its greedy token is the target's next (Leviathan et al. 2023,
        Sec. 3.1; for a greedy rule P(argmax q = argmax p)), over every position read."""
        positions = [agreed for continuation in self.agreed for agreed in continuation]
        return sum(positions) / max(1, len(positions))


def replayed_rounds(
    agreed: Sequence[bool], confidence: Sequence[float], gamma: int, exit_at: float
) -> list[tuple[int, int]]:
    """(drafted, emitted) of each greedy round along one continuation of the target's (:class:`DraftReplay`): a round
    from position L drafts the positions L, L + 1, ..., at most ``gamma`` of them, stopping after the first whose
    confidence is under ``exit_at`` and before the continuation's last position, which its correction or bonus
    takes; it accepts the drafted positions up to the first the draft disagrees on and emits one token more. After
    a disagreement the draft runs on its own token, whose confidence is not read here: the one at the target's
    token stands for it (it only decides where a rejected round stops drafting)."""
    rounds, position, end = [], 0, len(agreed)
    while position < end:
        room, drafted = min(gamma, end - position - 1), 0
        while drafted < room:
            drafted += 1
            if confidence[position + drafted - 1] < exit_at:
                break
        accepted = 0
        while accepted < drafted and agreed[position + accepted]:
            accepted += 1
        rounds.append((drafted, accepted + 1))
        position += accepted + 1
    return rounds


@dataclass(frozen=True)
class RoundOverheads:
    """What the engine's rounds cost beyond the models' passes, in ms, read from its own trace
    (:func:`~specviz.analysis.defaults.round_overheads`): each drafted token's draft distribution, draw and
    bookkeeping (``drafted_ms``), and each verified position's target distribution, check and record
    (``position_ms``). Both are work over the vocabulary that a pass profile does not time."""

    drafted_ms: float = 0.0
    position_ms: float = 0.0


def round_ms(drafted: int, target: PassProfile, draft: PassProfile, overheads: RoundOverheads) -> float:
    """A greedy round of ``drafted`` tokens, in ms: the draft's one-token steps, the target's pass over drafted + 1
    positions (this machine's T(k + 1)) and the engine's work on each drafted token and verified position."""
    return (
        drafted * (draft.step_ms + overheads.drafted_ms)
        + target.pass_cost_ms(drafted + 1)
        + (drafted + 1) * overheads.position_ms
    )


def replayed_speedup(
    replay: DraftReplay,
    gamma: int,
    exit_at: float,
    target: PassProfile,
    draft: PassProfile,
    overheads: RoundOverheads = RoundOverheads(),
) -> float:
    """The speedup over the target's one-token step of greedy rounds at ``gamma`` and ``exit_at`` replayed along
    the target's text: the tokens they emit times T(1) over what they cost (:func:`round_ms`). Without overheads it
    is Thm. 3.8's ratio of Leviathan et al. 2023, E[tokens] / (k c + v(k)) a round, with the rounds as they fall
    instead of an i.i.d. α, and this machine's v(k)."""
    rounds = [
        one
        for agreed, confidence in zip(replay.agreed, replay.confidence)
        for one in replayed_rounds(agreed, confidence, gamma, exit_at)
    ]
    cost = sum(round_ms(drafted, target, draft, overheads) for drafted, _ in rounds)
    return sum(emitted for _, emitted in rounds) * target.step_ms / cost if cost else 0.0


def priced_draft(alpha: float, target: PassProfile, draft: PassProfile) -> tuple[int, float]:
    """(best γ, the speedup priced there) of a draft at acceptance ``alpha``: Thm. 3.8 at c = the draft's step over
    the target's and this machine's v(k)."""
    c = cost_coefficient(target, draft)
    gamma = best_priced_gamma(alpha, c, target)
    return gamma, expected_speedup(alpha, gamma, c, target.verify_cost(gamma))


def replayed_draft(
    replay: DraftReplay,
    target: PassProfile,
    draft: PassProfile,
    overheads: RoundOverheads = RoundOverheads(),
    exits: Sequence[float] = EXITS,
) -> tuple[int, float, float]:
    """(γ, confidence exit, the speedup replayed there): the best of every γ the profile measured with each of
    ``exits`` (:func:`replayed_speedup`; a tie keeps the smaller γ, then the smaller exit)."""
    priced = {
        (g, e): replayed_speedup(replay, g, e, target, draft, overheads) for g in target.verify_costs for e in exits
    }
    gamma, exit_at = max(priced, key=lambda choice: priced[choice])
    return gamma, exit_at, priced[(gamma, exit_at)]


Profiles = dict[tuple[str, str], tuple[PassProfile, PassProfile]]  # (target precision, draft precision) -> profiles


def fastest_drafts(
    profiles: Profiles,
    replays: dict[str, DraftReplay],
    overheads: dict[str, RoundOverheads] | None = None,
    exits: Sequence[float] = EXITS,
) -> dict[str, FastestDraft]:
    """For each target precision, the draft precision, γ and confidence exit (one of ``exits``) whose greedy rounds,
    replayed along the target's text at this machine's costs, are fastest (:func:`replayed_draft`). ``profiles``:
    (target precision, draft precision) -> (target, draft); ``replays``: by draft precision; ``overheads``: the
    engine's own per round, by target precision (none where absent). The output is the target's whatever the draft runs
    in, so every choice is as exact as the target's precision."""
    fastest: dict[str, FastestDraft] = {}
    for (dtype, draft_dtype), (target, draft) in profiles.items():
        spent = (overheads or {}).get(dtype, RoundOverheads())
        gamma, exit_at, speedup = replayed_draft(replays[draft_dtype], target, draft, spent, exits)
        if dtype not in fastest or speedup > fastest[dtype].speedup:
            fastest[dtype] = FastestDraft(draft_dtype, gamma, speedup, speedup * 1000 / target.step_ms, exit_at)
    return fastest


def measured_defaults(profiles: dict[str, tuple[PassProfile, PassProfile]], alpha: float) -> MeasuredDefaults:
    """Pick the precision that keeps the lesson true: float32 (exact) where its speculation, priced at this machine's
    v(k) and c at the draft's acceptance ``alpha``, pays at least ``PAYS``; otherwise the precision whose priced
    speedup is highest (bfloat16, lossless only up to rounding). ``profiles``: precision -> (target, draft)."""
    priced = {}
    for dtype, (target, draft) in profiles.items():
        gamma, speedup = priced_draft(alpha, target, draft)
        priced[dtype] = (speedup, gamma)
    exact = priced.get("float32")
    dtype = "float32" if exact and exact[0] >= PAYS else max(priced, key=lambda d: priced[d][0])
    words = ", ".join(f"{d} {speedup:.2f}× at γ = {g}" for d, (speedup, g) in priced.items())
    why = (
        "float32 pays, so the exact precision is the default"
        if dtype == "float32"
        else f"float32 does not reach {PAYS}×, so {dtype} is the default (lossless only up to rounding)"
    )
    return MeasuredDefaults(
        dtype,
        priced[dtype][1],
        f"At the draft's greedy acceptance on held-out prompts, "
        f"α = {alpha:.2f}, the theory priced at this machine's measured v(k) and c gives {words}: "
        f"{why}.",
    )


def priced_story(priced: float, alpha: float, gamma: int, c: float, target: PassProfile) -> str:
    """The theory's speedup for a run, priced with this machine's profile, named for what it is: a prediction beside
    the configuration's one speed figure (the race's measurement, quoted by every speed page), never in its place."""
    return (
        f"**The theory at this α and c**, priced with this machine's profile: {priced:.2f}× over the target alone "
        f"(α = {alpha:.2f}, γ = {gamma}, c = {c:.3f}; {target.model} in {kernel_words(target)}, {target.cpu}, "
        "profiled once when the models were "
        "loaded). A prediction, not a measurement: the configuration's speedup is the race's, in the headline above "
        "(before a race, this priced figure, labelled so). Live timings are checked against it."
    )
