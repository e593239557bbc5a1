"""How long a session waits for shared work, estimated from past runs (pure: the pool's state in, seconds out).

Each label keeps its recent run times; a queued newcomer waits for the jobs ahead of it to free a slot (each running
one's remaining time, each queued one's mean run), then for its own mean run.
"""

from __future__ import annotations

from specviz.serving.jobs import Job

RUNS_KEPT = 20  # recent run times kept per label


def record_run(durations: dict[str, list[float]], label: str, seconds: float) -> None:
    """Keep a finished run's seconds among its label's :data:`RUNS_KEPT` latest."""
    durations.setdefault(label, []).append(seconds)
    del durations[label][:-RUNS_KEPT]


def mean_run(durations: dict[str, list[float]], label: str) -> float | None:
    """The mean of a label's recent runs, None before its first."""
    runs = durations.get(label)
    return sum(runs) / len(runs) if runs else None


def remaining_seconds(job: Job, mean: float | None, now: float) -> float | None:
    """Seconds until a job's result: from its own progress once it has made some (elapsed x the share still to do
    over the share done), else from its label's ``mean`` run; None when neither is known yet."""
    done, total, _ = job.progress
    if job.started is not None and 0 < done < total:
        return (now - job.started) * (total - done) / done
    if mean is None or job.started is None:
        return mean
    return max(0.0, mean - (now - job.started))


def queue_wait(remaining: list[float], workers: int) -> float:
    """Seconds until a slot frees for a newcomer when jobs with these remaining times go first, in order."""
    slots = [0.0] * workers
    for seconds in remaining:
        slots[slots.index(min(slots))] += seconds
    return min(slots)
