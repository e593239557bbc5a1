"""llama.cpp's pass over k tokens on this machine, beside the app's: why its speculation does not pay where the app's
does.

A verification pass over k tokens is cheap only while it costs about one token's step, v(k) = t(k) / t(1) near 1
(the roofline: reading the weights once dominates). llama.cpp's Q4_K kernels de-quantise each block of weights for
every row, so on a CPU with few cores its pass grows with k, and speculation with a cheap draft then loses to its
target alone; the app's int8 pass streams int8 weights once for all rows and stays near flat.
``llama-bench -p 1,2,...,K -n 0 -o json`` times a pass over each k (prompt processing of k tokens, ``avg_ns``);
``measure_llamacpp_passes`` runs it on the target's GGUF and keeps the result for this machine
(``benchmarks/bench_llamacpp.py`` calls it beside its race with llama.cpp), which the roofline view shows when there.

No streamlit.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from specviz.cache import cache_root, write_json_atomically
from specviz.runtime.machine import cpu_name

PASS_TOKENS = (1, 2, 3, 4, 5, 6)  # the k each pass is timed at (a draft of up to 5 tokens, plus one)


@dataclass(frozen=True)
class LlamaCppPasses:
    """llama.cpp's measured pass over k tokens: ``pass_ms[i]`` for ``tokens[i]``, on ``model`` with ``threads``."""

    model: str  # llama-bench's model_type, e.g. "qwen2 1.5B Q4_K - Medium"
    cpu: str
    threads: int
    tokens: tuple[int, ...]
    pass_ms: tuple[float, ...]
    measured_at: str

    def relative(self) -> tuple[float, ...]:
        """v(k) = t(k) / t(1) for each measured k (t(1) must be among them)."""
        one = self.pass_ms[self.tokens.index(1)]
        return tuple(ms / one for ms in self.pass_ms)


def read_llama_bench(text: str, measured_at: str) -> LlamaCppPasses:
    """The passes in ``llama-bench -o json`` output: one record per prompt size with ``n_gen`` 0. Raises ValueError
    for anything else (not JSON, no such records, several models or thread counts, no one-token pass)."""
    try:
        records = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not llama-bench's JSON output: {error}") from error
    if not isinstance(records, list):
        raise ValueError("not llama-bench's JSON output: a list of records was expected")
    passes = [r for r in records if isinstance(r, dict) and r.get("n_gen") == 0 and r.get("n_prompt", 0) > 0]
    if not passes or len({(r.get("model_type"), r.get("n_threads")) for r in passes}) != 1:
        raise ValueError("llama-bench's output must time prompt passes (-n 0) of one model at one thread count")
    passes.sort(key=lambda r: int(r["n_prompt"]))
    tokens = tuple(int(r["n_prompt"]) for r in passes)
    if 1 not in tokens:
        raise ValueError("llama-bench's output has no one-token pass (-p 1,...) to measure the others against")
    return LlamaCppPasses(
        model=str(passes[0]["model_type"]),
        cpu=str(passes[0].get("cpu_info", "")),
        threads=int(passes[0]["n_threads"]),
        tokens=tokens,
        pass_ms=tuple(float(r["avg_ns"]) / 1e6 for r in passes),
        measured_at=measured_at,
    )


def llamacpp_passes_file() -> Path:
    """Where this machine's llama.cpp passes are kept (one CPU, one record: the latest benchmark's)."""
    return cache_root() / "machine" / "llamacpp-passes.json"


def store_llamacpp_passes(passes: LlamaCppPasses) -> None:
    write_json_atomically(llamacpp_passes_file(), dataclasses.asdict(passes))


def stored_llamacpp_passes() -> LlamaCppPasses | None:
    """The passes measured on this machine's CPU, or None (never measured, another CPU's, unreadable)."""
    try:
        with open(llamacpp_passes_file(), encoding="utf-8") as f:
            stored = json.load(f)
        passes = LlamaCppPasses(**{**stored, "tokens": tuple(stored["tokens"]), "pass_ms": tuple(stored["pass_ms"])})
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return passes if passes.cpu == cpu_name() else None


def llamacpp_table(passes: LlamaCppPasses) -> pd.DataFrame:
    """One row per measured pass size: llama.cpp's ms and v(k) = t(k) / t(1) in its own steps."""
    return pd.DataFrame(
        {
            "tokens in the pass": passes.tokens,
            "llama.cpp, ms": passes.pass_ms,
            "llama.cpp v(k), steps": passes.relative(),
        }
    )


def llamacpp_sentence(passes: LlamaCppPasses) -> str:
    """What the measured passes say: the largest pass's cost in llama.cpp's own one-token steps."""
    largest = max(passes.tokens)
    cost = passes.relative()[passes.tokens.index(largest)]
    return (
        f"llama.cpp on this CPU ({passes.model}, {passes.threads} threads; llama-bench, "
        f"{passes.measured_at[:10]}): a pass over {largest} tokens costs {cost:.1f} of its one-token steps "
        f"({passes.pass_ms[passes.tokens.index(largest)]:.0f} ms against {passes.pass_ms[passes.tokens.index(1)]:.0f} "
        "ms). Verifying a draft there is not nearly free, so its speculation gains less than a flat pass allows "
        "(compare the v(k) column of each precision above)."
    )


def measure_llamacpp_passes(llama_bench: Path, gguf: Path, threads: int) -> LlamaCppPasses:
    """Time llama.cpp's pass over each k of :data:`PASS_TOKENS` on ``gguf`` (``llama-bench -p 1,...,K -n 0``, three
    repetitions, ``threads`` threads), keep it for this machine and return it. Raises ``subprocess.CalledProcessError``
    when llama-bench fails, ValueError when its output is not what :func:`read_llama_bench` reads."""
    sizes = ",".join(map(str, PASS_TOKENS))
    command = [str(llama_bench), "-m", str(gguf), "-p", sizes, "-n", "0", "-t", str(threads), "-r", "3", "-o", "json"]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    passes = read_llama_bench(out, datetime.now(UTC).isoformat(timespec="seconds"))
    store_llamacpp_passes(passes)
    return passes
