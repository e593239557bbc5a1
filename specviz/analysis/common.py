"""What every analysis shares: the progress callback type and the bounds on one request's work."""

from __future__ import annotations

from typing import Callable

Progress = Callable[[int, int], None] | None

SWEEP_GAMMAS_MAX = 8  # block sizes per sweep
SWEEP_TOKENS_MAX = 64  # new tokens per sweep run
SWEEP_PAIRS = 3  # alternating (target alone, speculative) pairs timed per gamma, medians
TIMING_REPEATS_MAX = 20
COMPARE_BETAS = (1, 2, 3, 4, 5)


def _tick(on_progress: Progress, done: int, total: int) -> None:
    if on_progress:
        on_progress(done, total)
