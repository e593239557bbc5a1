"""What every analysis shares: a decoded trace's stats and the sizing of a costly button's work by the machine
profile (the bounds on one request's work, those of a button's included, are :mod:`specviz.limits`)."""

from __future__ import annotations

from specviz.engine.trace import Stats, Trace
from specviz.limits import BUTTON_BUDGET_S, Progress


def _tick(on_progress: Progress | None, done: int, total: int) -> None:
    if on_progress:
        on_progress(done, total)


def stats_of(trace: Trace) -> Stats:
    """The stats of a trace the engine decoded (it records them with every run)."""
    assert trace.stats is not None, "a decoded trace carries its stats"
    return trace.stats


def units_in_budget(unit_seconds: float, fewest: int, most: int) -> int:
    """How many units of work costing ``unit_seconds`` each a costly button runs by default: as many as
    :data:`~specviz.limits.BUTTON_BUDGET_S` holds on this machine (predicted from its profile), within [``fewest``,
    ``most``] (``most`` wins where ``fewest`` exceeds it)."""
    return min(most, max(fewest, int(BUTTON_BUDGET_S // unit_seconds)))


def decoding_seconds(runs: int, steps: int, target_step_ms: float) -> float:
    """Seconds ``runs`` decodes of ``steps`` target steps each take, predicted with the machine profile's one-token step
    (a speculative run costs no more where speculation pays): what a costly button costs before it runs."""
    return runs * steps * target_step_ms / 1e3
