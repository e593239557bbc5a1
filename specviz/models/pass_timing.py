"""Timing a model's cached passes, as the machine profile (:mod:`specviz.models.profile`) holds them: a pass over
n = 1..9 new tokens after a realistic cached context, every size timed in alternating rounds, medians kept, and the
three signs that tell a loaded machine from a quiet one: how far repeated rounds of one size disagree (the spread),
the share of a core the timing thread had (:func:`cpu_share`: a load of this process's other threads, even a constant
one), and the cores other processes kept busy meanwhile, as the OS counts them (:func:`other_cores`).

Pure torch; no streamlit.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import NamedTuple

from specviz.limits import Progress
from specviz.runtime.loaded import LoadedModel
from specviz.runtime.machine import device_wait
from specviz.runtime.protocol import ForwardFn, KVCachedSequence

PROFILE_TOKENS = 9  # passes over k + 1 = 1..9 new tokens: every block size up to gamma 8
CONTEXT_TOKENS = 128  # cached context before every timed pass (a chat prompt and some answer)
PROFILE_ROUNDS = 5  # rounds of the 9 passes; medians

PROC_STAT = "/proc/stat"


class Clock(NamedTuple):
    """The clocks a measurement's load is read from, at one moment (:func:`thread_clock`)."""

    wall: float  # perf_counter seconds
    thread_cpu: float  # this thread's CPU seconds
    process_cpu: float  # this process's CPU seconds (every thread)
    machine_busy: float | None  # every core's busy seconds since boot (:func:`machine_busy_seconds`; None: unknown)


def machine_busy_seconds(path: str = PROC_STAT) -> float | None:
    """Seconds the machine's cores have spent busy since boot, as the kernel counts them: the first line of
    ``/proc/stat`` (user, nice, system, irq, softirq and steal ticks: everything but idle and iowait; steal is time a
    hypervisor gave another machine) over the clock's ticks a second. None where there is no such file (not Linux)."""
    try:
        with open(path, encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def thread_clock() -> Clock:
    """The clocks now: what :func:`cpu_share` and :func:`other_cores` compare with a later reading."""
    return Clock(time.perf_counter(), time.thread_time(), time.process_time(), machine_busy_seconds())


def cpu_share(since: Clock) -> float:
    """The calling thread's CPU seconds over the wall seconds since ``since`` (:func:`thread_clock`), s = CPU / wall.

    A thread that computes (a pass's Python, and its share of each parallel product, whose other threads it waits for
    spinning) has a core all the time on a quiet machine: s ~ 1. Where other work wants the cores (another process,
    or another thread of this one: a page measured while the worker decodes), the scheduler shares them, and the
    thread waits 1 - s of the time. Unlike the spread of repeated timings, this sees a load that stays constant."""
    now = thread_clock()
    return (now.thread_cpu - since.thread_cpu) / max(now.wall - since.wall, 1e-9)


def other_cores(since: Clock) -> float | None:
    """The cores other processes kept busy since ``since`` (:func:`thread_clock`), as the OS counts them: the machine's
    busy seconds (:func:`machine_busy_seconds`) less this process's CPU seconds, over the wall seconds (0: nothing else
    ran; 1.5: one and a half cores of other work). None where the OS does not say. This sees what the timing thread's
    share misses on a machine with a core to spare: a browser painting, a build, another server's work."""
    now = thread_clock()
    if now.machine_busy is None or since.machine_busy is None:
        return None
    others = (now.machine_busy - since.machine_busy) - (now.process_cpu - since.process_cpu)
    return max(0.0, others) / max(now.wall - since.wall, 1e-9)


class Timed(NamedTuple):
    """One measurement of a model's passes (:func:`time_passes`)."""

    pass_ms: tuple[float, ...]  # the median ms of the pass over n = 1..PROFILE_TOKENS new tokens
    spread: float  # the median over sizes of each size's slowest-over-fastest round (one hiccup moves it not)
    cpu_share: float  # the timing thread's share of a core over the timed rounds (:func:`cpu_share`)
    other_cores: float | None  # the cores other processes kept busy over the timed rounds (:func:`other_cores`)


def time_passes(
    loaded: LoadedModel,
    forward: ForwardFn,
    context: list[int],
    rounds: int = PROFILE_ROUNDS,
    on_progress: Progress | None = None,
) -> Timed:
    """Median ms of a cached pass over n = 1..``PROFILE_TOKENS`` new tokens after ``context[:-PROFILE_TOKENS]``, the
    spread of the rounds, the timing thread's share of a core and the other processes' cores while they ran
    (:class:`Timed`).

    One untimed warm-up of every size, then ``rounds`` rounds that time every size once, in forward order in
    odd rounds and backward in even ones, so a load that comes and goes falls on every size alike. Each pass is timed
    from an idle device to its end on the device (:func:`~specviz.runtime.machine.device_wait`: on a GPU, not the
    launches)."""
    state = KVCachedSequence()
    base = len(context) - PROFILE_TOKENS
    state.feed(forward, loaded, context[:base], 1)
    sizes = list(range(1, PROFILE_TOKENS + 1))
    times: dict[int, list[float]] = {n: [] for n in sizes}
    timed_from = thread_clock()
    for r in range(rounds + 1):
        if r == 1:  # the warm-up done
            timed_from = thread_clock()
        for n in sizes if r % 2 else sizes[::-1]:
            state.crop(base)
            device_wait(loaded.device)
            started = time.perf_counter()
            state.feed(forward, loaded, context[base : base + n], n)
            device_wait(loaded.device)
            if r:  # round 0 is the warm-up
                times[n].append((time.perf_counter() - started) * 1e3)
        if on_progress:
            on_progress(r + 1, rounds + 1)
    share, others = cpu_share(timed_from), other_cores(timed_from)
    spread = statistics.median(max(t) / min(t) for t in times.values())
    return Timed(tuple(statistics.median(times[n]) for n in sizes), spread, share, others)


def profile_context(loaded: LoadedModel) -> list[int]:
    """A realistic context: the tokens of a chat prompt, repeated up to ``CONTEXT_TOKENS`` (what the tokens are does
    not change a pass's cost), then the ``PROFILE_TOKENS`` the timed passes feed."""
    text = "Explain, step by step, why the sky is blue and the sunset is red. " * 16
    vocab = int(loaded.model.get_output_embeddings().out_features)
    ids = [i % vocab for i in loaded.tokenizer(text)["input_ids"]] if loaded.tokenizer is not None else []
    ids = ids or list(range(vocab))  # a tokenizer that makes nothing of the text: any ids cost the same
    while len(ids) < CONTEXT_TOKENS + PROFILE_TOKENS:
        ids += ids
    return ids[: CONTEXT_TOKENS + PROFILE_TOKENS]
