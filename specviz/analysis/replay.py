"""The replay that chooses ``--fastest`` and a pair's measured defaults: each draft's greedy rounds replayed along
the target's own text at this machine's measured pass costs (its profile: the target's pass over k + 1 tokens, the
draft's step, a round's overheads), every γ and confidence exit tried, the fastest kept; and the precision that keeps
the lesson true, from the theory's predicted speedup (Leviathan et al. 2023, Thm. 3.8) at the draft's acceptance.

Pure data in, plain data out; no streamlit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from specviz.analysis.roofline import EXITS, best_predicted_gamma, cost_coefficient
from specviz.models.profile import PassProfile
from specviz.rules.theory import expected_speedup

PAYS = 1.2  # a predicted speedup from which speculation visibly pays in a class
BREAKS_EVEN = 1.0  # a replayed speedup under this loses to the target alone: never chosen while another pays


class FastestDraft(NamedTuple):
    """A target precision's fastest draft here: its precision, γ, the speedup it is predicted at over the target alone,
    the tokens a second predicted (the speedup over the target's own step), and the confidence exit that pays
    (0: always γ tokens; :class:`~specviz.drafters.base.ConfidenceExit`)."""

    draft_dtype: str
    gamma: int
    speedup: float
    tokens_per_s: float
    confidence_exit: float

    @property
    def pays(self) -> bool:
        """Whether its replayed rounds beat the target alone (a speedup of at least :data:`BREAKS_EVEN`)."""
        return self.speedup >= BREAKS_EVEN


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


def predicted_draft(alpha: float, target: PassProfile, draft: PassProfile) -> tuple[int, float]:
    """(best γ, the speedup predicted there) of a draft at acceptance ``alpha``: Thm. 3.8 at c = the draft's step over
    the target's and this machine's v(k)."""
    c = cost_coefficient(target, draft)
    gamma = best_predicted_gamma(alpha, c, target)
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
    predicted = {
        (g, e): replayed_speedup(replay, g, e, target, draft, overheads) for g in target.verify_costs for e in exits
    }
    gamma, exit_at = max(predicted, key=lambda choice: predicted[choice])
    return gamma, exit_at, predicted[(gamma, exit_at)]


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
    """Pick the precision that keeps the lesson true: float32 (exact) where its speculation, predicted at this machine's
    v(k) and c at the draft's acceptance ``alpha``, pays at least ``PAYS``; otherwise the precision whose predicted
    speedup is highest (bfloat16, lossless only up to rounding). ``profiles``: precision -> (target, draft)."""
    predicted = {}
    for dtype, (target, draft) in profiles.items():
        gamma, speedup = predicted_draft(alpha, target, draft)
        predicted[dtype] = (speedup, gamma)
    exact = predicted.get("float32")
    dtype = "float32" if exact and exact[0] >= PAYS else max(predicted, key=lambda d: predicted[d][0])
    words = ", ".join(f"{d} {speedup:.2f}× at γ = {g}" for d, (speedup, g) in predicted.items())
    why = (
        "float32 pays, so the exact precision is the default"
        if dtype == "float32"
        else f"float32 does not reach {PAYS}×, so {dtype} is the default (lossless only up to rounding)"
    )
    return MeasuredDefaults(
        dtype,
        predicted[dtype][1],
        f"At the draft's greedy acceptance on held-out prompts, "
        f"α = {alpha:.2f}, the theory predicted at this machine's measured v(k) and c gives {words}: "
        f"{why}.",
    )
