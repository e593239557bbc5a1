"""What if: the same prompt decoded with two settings, compared round by round and against the theory.

Pure data in, plain data out; no streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from specviz.analysis.common import stats_of
from specviz.analysis.metrics import realised_blocks
from specviz.engine.trace import Trace
from specviz.rules.theory import expected_tokens_per_round

CHANGEABLE = ("gamma", "temperature", "rule")  # the settings the view lets a teacher change for the second run


@dataclass(frozen=True)
class RunDifference:
    """Where two runs of one prompt part, and how their rounds compare."""

    first_departure: int | None  # index of the first output token that differs (None: identical outputs)
    common_text: str  # the output both share, up to the departure
    first_rest: str  # what each writes from there
    second_rest: str
    rounds: tuple[int, int]
    tokens_per_round: tuple[float, float]
    per_round: pd.DataFrame  # round, tokens emitted by each run (0 past a run's end)


def changed_settings(first: Trace, second: Trace) -> dict[str, tuple]:
    """The changeable settings whose values differ between the two runs: name -> (first's, second's)."""
    return {
        name: (first.config.value(name), second.config.value(name))
        for name in CHANGEABLE
        if first.config.value(name) != second.config.value(name)
    }


def run_difference(first: Trace, second: Trace) -> RunDifference:
    """Compare two traces of the same prompt: their outputs token by token, their rounds one by one."""
    a, b = first.output_ids, second.output_ids
    departure = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if departure is None and len(a) != len(b):
        departure = min(len(a), len(b))
    texts = [t for r in first.rounds for t in r.emitted_texts]
    other = [t for r in second.rounds for t in r.emitted_texts]
    cut = len(a) if departure is None else departure
    count = max(len(first.rounds), len(second.rounds))
    emitted = [
        [len(r.emitted_ids) for r in trace.rounds] + [0] * (count - len(trace.rounds)) for trace in (first, second)
    ]
    return RunDifference(
        first_departure=departure,
        common_text="".join(texts[:cut]),
        first_rest="".join(texts[cut:]),
        second_rest="".join(other[cut:]),
        rounds=(len(first.rounds), len(second.rounds)),
        tokens_per_round=(stats_of(first).mean_tokens_per_round, stats_of(second).mean_tokens_per_round),
        per_round=pd.DataFrame({"round": range(1, count + 1), "first run": emitted[0], "second run": emitted[1]}),
    )


def theory_curve(trace: Trace, gammas: range = range(1, 17)) -> pd.DataFrame:
    """E[tokens per round] = (1 - α^(γ+1)) / (1 - α) against γ at the run's measured α (Leviathan et al. 2023,
    Eq. 1); the run's own point on it is :func:`measured_point`."""
    alpha = stats_of(trace).alpha_estimate
    return pd.DataFrame(
        {"gamma": list(gammas), "expected_tokens_per_round": [expected_tokens_per_round(alpha, g) for g in gammas]}
    )


def measured_point(trace: Trace) -> tuple[float, float]:
    """(mean realised block size, measured tokens per round): where the run itself sits on its curve."""
    blocks = realised_blocks(trace)
    return sum(blocks) / max(1, len(blocks)), stats_of(trace).mean_tokens_per_round
