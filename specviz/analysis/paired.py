"""Computations timed against each other on a shared machine: alternating pairs, and cycles of several.

A machine whose speed drifts within seconds (other sessions, the browser painting charts on the same cores) makes a
ratio of two times taken apart measure the drift; timed back to back, in an order that alternates, both sides of
each ratio meet the same load, and medians keep one noisy run from deciding. Pure: no models, no streamlit.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from specviz.models.profile import measured_load

A = TypeVar("A")
B = TypeVar("B")


@dataclass(frozen=True)
class PairedTimes(Generic[A, B]):
    """Two computations timed in alternating back-to-back pairs: each side's first result, and its seconds
    in pair order (pair i: ``first_seconds[i]`` and ``second_seconds[i]``, run one right after the other)."""

    first: A
    second: B
    first_seconds: list[float]
    second_seconds: list[float]

    @property
    def first_median(self) -> float:
        return statistics.median(self.first_seconds)

    @property
    def second_median(self) -> float:
        return statistics.median(self.second_seconds)

    @property
    def ratios(self) -> list[float]:
        """first / second seconds within each pair: the spread of a speedup measured pair by pair."""
        return [f / s for f, s in zip(self.first_seconds, self.second_seconds)]


def timed_in_alternating_pairs(
    first: Callable[[], tuple[A, float]], second: Callable[[], tuple[B, float]], pairs: int
) -> PairedTimes[A, B]:
    """Run two timed computations (each returns (result, seconds)) in ``pairs`` back-to-back pairs whose
    order alternates (first-second, second-first, ...); keep each one's first result and every time.

    On a shared machine whose speed drifts within seconds, both sides of a ratio meet the same load,
    and one noisy pair (the browser painting a page's charts on the same cores) cannot set the
    ratio of the medians. (With an even ``pairs`` each median is the mean of the middle two.)
    """
    (first_result, first_seconds), (second_result, second_seconds) = timed_in_cycles([first, second], pairs)
    return PairedTimes(first_result, second_result, first_seconds, second_seconds)


def timed_in_cycles(
    runs: list[Callable[[], tuple[Any, float]]],
    cycles: int,
    on_run: Callable[[int, int, int], None] | None = None,
) -> list[tuple[Any, list[float]]]:
    """Run each timed computation (each returns (result, seconds)) once per cycle, ``cycles`` times, the order
    reversed every other cycle; each one's first result and its seconds, cycle by cycle (``on_run(done, total,
    index)`` before each run). Within a cycle every computation meets about the same load as the others, so a
    ratio of two taken cycle by cycle measures the methods, not the machine's drift."""
    if cycles < 1:
        raise ValueError(f"cycles must be at least 1, not {cycles}")
    results: list[Any] = [None] * len(runs)
    seconds: list[list[float]] = [[] for _ in runs]
    done = 0
    for cycle in range(cycles):
        for i in range(len(runs)) if cycle % 2 == 0 else reversed(range(len(runs))):
            if on_run:
                on_run(done, cycles * len(runs), i)
            result, took = runs[i]()
            results[i] = result if cycle == 0 else results[i]
            seconds[i].append(took)
            done += 1
    return list(zip(results, seconds))


# Both margins are judgements set with the machine profile (#35), not measured figures: wide enough that a quiet
# machine's run-to-run noise stays inside them, narrow enough that a busy neighbour shows.
LOAD_SPREAD = 1.3  # timings of the same work this far apart: the machine's speed changed between them
ABOVE_THEORY = 1.15  # a measured speedup this far above what Thm. 3.8 allows at the measured alpha and c


TRIMMED_FROM = 5  # from this many timings on, the fastest and the slowest are left out of the comparison


def disagree(timings: Sequence[float]) -> bool:
    """Whether timings of the same work (back-to-back pairs' speedups, race lanes' steps over the quiet profile)
    differ by more than :data:`LOAD_SPREAD`: on a quiet machine they agree, so other work shared the cores. Of
    :data:`TRIMMED_FROM` timings or more, the fastest and the slowest are left out: one hiccup of a virtual machine
    (a page fault, a timer) is not a load, and a load that lasts moves more than one."""
    kept = sorted(timings)[1:-1] if len(timings) >= TRIMMED_FROM else list(timings)
    return bool(kept) and max(kept) > LOAD_SPREAD * min(kept)


def load_signs(
    pair_speedups: Sequence[float], measured: float, expected: float, other_cores: float | None = None
) -> list[str]:
    """Why a live speedup measures the machine's load rather than speculation, in words (empty: no sign of load):
    the one load check of every live speedup (the speed pages' timing, each γ of the sweep).

    Three signs. Other processes kept cores busy while it ran, as the OS counts them (``other_cores``:
    :func:`~specviz.models.pass_timing.other_cores`; None: not read). And two bounds the method cannot break: the pairs
    run the same work back to back, so on a quiet machine their ratios agree (:func:`disagree`); and no draft makes
    decoding faster than Thm. 3.8 (Leviathan et al. 2023) with verification at one step (v = 1) at the measured alpha
    and c (``expected``), so a ``measured`` speedup above it by :data:`ABOVE_THEORY` means the target-alone runs were
    slowed."""
    signs = list(measured_load(other_cores=other_cores))
    if disagree(pair_speedups):
        signs.append(
            f"the pairs disagree ({', '.join(f'{r:.2f}×' for r in pair_speedups)}): the machine's "
            "speed changed between them"
        )
    if measured > ABOVE_THEORY * expected:
        signs.append(
            f"the measured {measured:.2f}× is above the {expected:.2f}× the theory allows at "
            "this α and c: the target-alone runs were slowed by other work"
        )
    return signs
