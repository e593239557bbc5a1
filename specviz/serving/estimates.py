"""How long a session waits for shared work, and a lecture's preparation for its plan (pure: the pool's or the
preparation's state in, seconds out).

A job's expected run is its estimate from the machine profile (:mod:`specviz.serving.work_estimates`) or, without
one, its label's mean over recent runs; a queued newcomer waits for the jobs ahead of it to free a slot (each running
one's remaining time, each queued one's expected run), then for its own expected run.

A preparation's works run one after the other; what is left of it is their estimates scaled by the machine's pace
(:func:`pace`: what the finished ones took over what they were estimated at), the running one's less the time it has
run (:func:`plan_left`).
"""

from __future__ import annotations

from specviz.serving.jobs import Job

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


def remaining_seconds(job: Job, expected: float | None, now: float) -> float | None:
    """Seconds until a job's result. Before it shows progress: its ``expected`` run less the time it has run. Once
    it has: its own extrapolation (elapsed x the share still to do over the share done) weighed against that by the
    share done, so the figure moves from the estimate to the measurement as the run goes and one slow first step (a
    load, a warm-up) does not multiply it; None while neither is known."""
    done, total, _ = job.progress
    elapsed = now - job.started if job.started is not None else 0.0
    before = None if expected is None else max(0.0, expected - elapsed)
    if job.started is None or not 0 < done < total:
        return before
    measured = elapsed * (total - done) / done
    return measured if before is None else done / total * measured + (1 - done / total) * before


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
