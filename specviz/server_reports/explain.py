"""What an engine's numbers mean, against the theory of speculative decoding (Leviathan et al. 2023, Sec. 3; the
formulas live in :mod:`specviz.rules.theory`, which the Metrics page uses too): the i.i.d. alpha behind the reported
mean acceptance length, the per-position curve against alpha^i and the position where it falls off a cliff, the
tokens each target pass yields, and the speedup this alpha buys at the user's own draft cost c and pass cost v(k).
Pure functions; no torch, no streamlit."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specviz.rules.theory import best_gamma, expected_speedup, expected_tokens_per_round
from specviz.server_reports.record import EngineReport
from specviz.settings import ConfigError

CLIFF_SHARE = 0.5  # a position accepted, given the ones before it, at under half of alpha is a cliff
FINE_ALPHA, LOW_ALPHA = 0.7, 0.5
GAMMA_MAX = 64


@dataclass(frozen=True)
class Position:
    position: int  # 1-based
    reported: float  # share of drafts accepted through this position (the engines' per-position rate)
    conditional: float | None  # reported / the previous position's: its acceptance once the ones before passed
    theory: float  # alpha^i: every one of the i tokens accepted, each with probability alpha


@dataclass(frozen=True)
class Estimate:
    """What a block of gamma drafted tokens costs and yields at the user's c and v(gamma)."""

    gamma: int
    verify_cost: float  # v: the target's pass over gamma + 1 tokens, in one-token steps
    tokens_per_pass: float  # (1 - alpha^(gamma+1)) / (1 - alpha)
    cost: float  # gamma c + v, in target steps
    speedup: float  # tokens_per_pass / cost


@dataclass(frozen=True)
class Explanation:
    alpha: float | None
    alpha_how: str  # how alpha was found from the report
    positions: tuple[Position, ...]
    cliff: Position | None
    predictions: tuple[Estimate, ...]
    best_gamma: int | None  # at this alpha and c, with v = 1
    verdict: str

    @property
    def sentence(self) -> str:
        """The verdict as a sentence: the command's last line, the page's verdict."""
        return self.verdict[:1].upper() + self.verdict[1:] + "."


def iid_alpha(mean_acceptance_length: float, draft_length: int) -> float:
    """The alpha whose Eq. 1, (1 - a^(k+1)) / (1 - a) tokens per pass at k = ``draft_length``, is the reported mean
    acceptance length (bisection: Eq. 1 rises with alpha from 1 at alpha = 0 to k + 1 at alpha = 1)."""
    low, high = 0.0, 1.0
    if mean_acceptance_length >= draft_length + 1:
        return 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if expected_tokens_per_round(middle, draft_length) < mean_acceptance_length:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def alpha_of(report: EngineReport, draft_length: int | None = None) -> tuple[float | None, str]:
    """(alpha, how it was found): the i.i.d. alpha behind the mean acceptance length at the engine's draft length
    (``draft_length`` where the report has none); the acceptance rate alone where no draft length is known (it
    understates alpha: the drafted tokens after a rejection count as drafted, never as accepted)."""
    k = report.draft_length or draft_length
    length = report.mean_acceptance_length
    if length is None and report.acceptance_rate is not None and k:
        length = 1 + report.acceptance_rate * k  # every draft holding k tokens
    if length is not None and k:
        how = f"the i.i.d. alpha whose (1 - a^(k+1)) / (1 - a) is the {length:.2f} tokens per pass at k = {k}"
        return iid_alpha(length, k), how
    if report.acceptance_rate is not None:
        return (
            report.acceptance_rate,
            "the acceptance rate itself (no draft length k to fit alpha to; it understates alpha)",
        )
    return None, "unknown: the report gives a mean acceptance length but no draft length k (give it)"


def positions(report: EngineReport, alpha: float | None) -> tuple[Position, ...]:
    """Each reported position against alpha^i, with its conditional acceptance (the engines report the share of all
    drafts accepted through position i: alpha^i under i.i.d. acceptance, so the ratio of neighbours is alpha)."""
    reported = report.per_position or ()
    before = (1.0, *reported)  # through position 0: every draft
    return tuple(
        Position(i, rate, rate / before[i - 1] if before[i - 1] > 0 else None, (alpha or 0.0) ** i)
        for i, rate in enumerate(reported, 1)
    )


def cliff(curve: tuple[Position, ...], alpha: float | None) -> Position | None:
    """The first position past the first whose conditional acceptance is below half of alpha: the curve falls there
    far faster than alpha^i, as one broken position does (DFlash's users found a sliding-window bug this way)."""
    if not alpha:
        return None
    return next((p for p in curve[1:] if p.conditional is not None and p.conditional < CLIFF_SHARE * alpha), None)


def predicted_speedups(
    alpha: float, c: float, gammas: tuple[int, ...], verify_costs: tuple[float, ...] = ()
) -> tuple[Estimate, ...]:
    """Each gamma predicted with :func:`~specviz.rules.theory.expected_speedup`: ``verify_costs`` one v per gamma, or
    one
    for all, or none (v = 1, Leviathan et al.'s idle-compute assumption)."""
    check_costs(c, gammas, verify_costs)
    vs = verify_costs * len(gammas) if len(verify_costs) == 1 else verify_costs or (1.0,) * len(gammas)
    return tuple(
        Estimate(g, v, expected_tokens_per_round(alpha, g), g * c + v, expected_speedup(alpha, g, c, v))
        for g, v in zip(gammas, vs, strict=True)
    )


def check_costs(c: float, gammas: tuple[int, ...], verify_costs: tuple[float, ...]) -> None:
    if not (math.isfinite(c) and c >= 0):
        raise ConfigError(f"c (the draft's step over the target's) must be a number >= 0; got {c}")
    if any(not 1 <= g <= GAMMA_MAX for g in gammas):
        raise ConfigError(f"gamma must be in [1, {GAMMA_MAX}]; got {', '.join(map(str, gammas))}")
    if any(not (math.isfinite(v) and v > 0) for v in verify_costs):
        raise ConfigError(
            f"v(k) (the target's pass over k + 1 tokens in one-token steps) must be > 0; got {verify_costs}"
        )
    if len(verify_costs) not in (0, 1, len(gammas)):
        raise ConfigError(f"give one v(k) per gamma ({len(gammas)}) or one for all; got {len(verify_costs)}")


def explain(
    report: EngineReport,
    c: float | None = None,
    gammas: tuple[int, ...] = (),
    verify_costs: tuple[float, ...] = (),
    draft_length: int | None = None,
) -> Explanation:
    """The whole explanation; the gammas predicted default to the engine's own draft length."""
    alpha, how = alpha_of(report, draft_length)
    curve = positions(report, alpha)
    gammas = gammas or tuple(filter(None, (report.draft_length or draft_length,)))
    predicted = predicted_speedups(alpha, c, gammas, verify_costs) if alpha is not None and c is not None else ()
    best = best_gamma(alpha, c) if alpha is not None and c is not None else None
    return Explanation(
        alpha, how, curve, found := cliff(curve, alpha), predicted, best, verdict(alpha, found, predicted, c, best)
    )


def verdict(
    alpha: float | None, broken: Position | None, predicted: tuple[Estimate, ...], c: float | None, best: int | None
) -> str:
    """In words: "your acceptance is fine (alpha = 0.82); your draft costs c = 0.4 of a target step, so gamma 5
    cannot pay: ..."."""
    if alpha is None:
        return "alpha is unknown: give the draft length k the engine ran with"
    words = "fine" if alpha >= FINE_ALPHA else "middling" if alpha >= LOW_ALPHA else "low"
    parts = [f"your acceptance is {words} (alpha = {alpha:.2f})"]
    if broken is not None:
        parts.append(
            f"but it falls off a cliff at position {broken.position}: accepted {broken.conditional:.0%} of the time "
            f"once the tokens before it passed, against alpha = {alpha:.2f} (look for what changes there: a window, "
            "a cache, a position limit)"
        )
    costly = f"your draft costs c = {c or 0:g} of a target step, so "  # said once, before the first gamma that fails
    for p in predicted:
        spent = f"{p.tokens_per_pass:.2f} tokens per pass for {p.gamma} c + v = {p.cost:.2f} target steps"
        if p.speedup >= 1:
            parts.append(f"gamma {p.gamma} pays {p.speedup:.3g}x ({spent})")
            continue
        ceiling = expected_speedup(1.0, p.gamma, c or 0.0, p.verify_cost)
        reason = " even at alpha = 1" if ceiling < 1 else f": {spent}, {p.speedup:.3g}x"
        parts.append(f"{costly}gamma {p.gamma} cannot pay{reason}")
        costly = ""
    if best is not None and c is not None:
        top = expected_speedup(alpha, best, c)
        parts.append(
            f"the best gamma at this alpha and c is {best} ({top:.3g}x with v = 1)"
            if top >= 1
            else f"no gamma pays at this alpha and c: the best, {best}, gives {top:.3g}x with v = 1"
        )
    return "; ".join(parts)
