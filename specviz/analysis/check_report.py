"""What a long check on a lent machine keeps, whatever cuts it short (:mod:`benchmarks.gpu_check`): its figures section
by section, written again after each, and the comparisons its sections make of two greedy outputs.

Pure: no models, no streamlit.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import torch

from specviz.cache import write_json_atomically


class SectionReport:
    """A check's figures, written to ``path`` as it starts and again after each section (a run its time limit cuts
    keeps what it measured): each section's result and seconds, and every failure in words."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict = {"sections": {}, "failures": []}
        self.write()

    def write(self) -> None:
        write_json_atomically(self.path, self.data)

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[dict]:
        """A timed section whose dict the caller fills; an exception in it becomes a failure, and the run goes on."""
        print(f"## {name}", flush=True)
        result: dict = {}
        started = time.perf_counter()
        try:
            yield result
        except Exception as exc:  # noqa: BLE001 - the check records what failed and measures the rest
            traceback.print_exc()
            self.fail(f"{name}: {type(exc).__name__}: {exc}")
        result["seconds"] = round(time.perf_counter() - started, 1)
        self.data["sections"][name] = result
        self.write()

    def fail(self, words: str) -> None:
        print(f"  FAILED: {words}", flush=True)
        self.data["failures"].append(words)


def first_divergence(ours: list[int], theirs: list[int]) -> int | None:
    """The first position where two greedy outputs differ (one shorter than the other differs where it ends), None
    where they are identical."""
    for position, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return position
    return None if len(ours) == len(theirs) else min(len(ours), len(theirs))


def top2_margin(logits: torch.Tensor) -> float:
    """The gap between a position's two largest logits: how near a tie its greedy choice was (a few thousandths in
    float32: a tie another kernel's summation order may break the other way)."""
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])
