"""What every analysis shares: the progress callback types, a decoded trace's stats and the bounds on one request's
work."""

from __future__ import annotations

from specviz.engine.trace import Stats, Trace
from specviz.progress import Progress

SWEEP_GAMMAS_MAX = 8  # block sizes per sweep
SWEEP_TOKENS_MAX = 64  # new tokens per sweep run
SWEEP_PAIRS = 3  # cycles of (target alone, each speculative γ) timed per sweep at most, medians
BUTTON_BUDGET_S = 15.0  # a costly button's default work is sized by the machine profile to about this
TIMING_REPEATS_MAX = 20


def _tick(on_progress: Progress | None, done: int, total: int) -> None:
    if on_progress:
        on_progress(done, total)


def stats_of(trace: Trace) -> Stats:
    """The stats of a trace the engine decoded (it records them with every run)."""
    assert trace.stats is not None, "a decoded trace carries its stats"
    return trace.stats


def units_in_budget(unit_seconds: float, fewest: int, most: int) -> int:
    """How many units of work costing ``unit_seconds`` each a costly button runs by default: as many as
    :data:`BUTTON_BUDGET_S` holds on this machine (priced from its profile), within [``fewest``, ``most``] (``most``
    wins where ``fewest`` exceeds it)."""
    return min(most, max(fewest, int(BUTTON_BUDGET_S // unit_seconds)))


def decoding_seconds(runs: int, steps: int, target_step_ms: float) -> float:
    """Seconds ``runs`` decodes of ``steps`` target steps each take, priced with the machine profile's one-token step
    (a speculative run costs no more where speculation pays): what a costly button costs before it runs."""
    return runs * steps * target_step_ms / 1e3
