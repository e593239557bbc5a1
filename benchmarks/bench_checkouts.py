"""Benchmark: one race in two checkouts, alternating, so a change that moves code shows whether a CPU figure moved.

Each repetition runs ``python -m specviz race ... --out FILE`` once in each checkout (in ABBA order: A B, then B A, so
a machine that slows or speeds up over the run weighs on both alike), each in a fresh process under ``/usr/bin/time``
for its peak resident memory. Printed per checkout: the median tokens per second of the target alone and of the
speculative lane, the median race speedup, the median peak RSS (GB) and whether every speculative text was the
target's own; then the ratios, this checkout over the baseline, from this one run.

    .venv/bin/python -m benchmarks.bench_checkouts --baseline /path/to/old/checkout [--repeats 3] -- \
        --target qwen-coder-1.5b --draft qwen-coder-0.5b --dtype int8 --draft-dtype int4 --gamma 5 \
        --max-new-tokens 48

A benchmark, not a test: nothing is asserted; each checkout runs with its own ``.venv`` if it has one, else this one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Run:
    target_tps: float
    speculative_tps: float
    speedup: float
    peak_gb: float
    identical: bool


def python_of(checkout: Path) -> str:
    own = checkout / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def race_once(checkout: Path, race_args: list[str]) -> Run:
    """One race in ``checkout`` (its own process, its working directory the checkout so its package is imported)."""
    with tempfile.TemporaryDirectory() as folder:
        out, times = Path(folder) / "race.json", Path(folder) / "time.txt"
        command = ["/usr/bin/time", "-f", "%M", "-o", str(times), python_of(checkout), "-m", "specviz", "race"]
        subprocess.run([*command, *race_args, "--out", str(out)], cwd=checkout, check=True, capture_output=True)
        summary = json.loads(out.read_text())
        peak_kb = int(times.read_text().split()[-1])
    return Run(
        target_tps=float(summary["target_alone"]["tokens_per_s"]),
        speculative_tps=float(summary["speculative"]["tokens_per_s"]),
        speedup=float(summary["speedup"]),
        peak_gb=peak_kb / 1e6,
        identical=bool(summary["identical"]),
    )


def medians(runs: list[Run]) -> dict[str, float]:
    return {
        field: statistics.median(getattr(run, field) for run in runs)
        for field in ("target_tps", "speculative_tps", "speedup", "peak_gb")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout (e.g. a git worktree)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("race_args", nargs=argparse.REMAINDER, help="-- then `python -m specviz race`'s flags")
    args = parser.parse_args()
    race_args = [a for a in args.race_args if a != "--"]
    checkouts = {"baseline": args.baseline.resolve(), "this": HERE}
    runs: dict[str, list[Run]] = {name: [] for name in checkouts}
    for repeat in range(args.repeats):
        order = ["baseline", "this"] if repeat % 2 == 0 else ["this", "baseline"]
        for name in order:
            runs[name].append(race_once(checkouts[name], race_args))
            print(f"  {repeat + 1}/{args.repeats} {name}: {runs[name][-1]}", flush=True)
    print(f"race {' '.join(race_args)}; {args.repeats} repeats, ABBA order; medians")
    print("| checkout | target alone tok/s | speculative tok/s | speedup | peak RSS (GB) | identical |")
    print("|---|---|---|---|---|---|")
    table = {name: medians(found) for name, found in runs.items()}
    for name, row in table.items():
        same = all(run.identical for run in runs[name])
        print(
            f"| {name} | {row['target_tps']:.2f} | {row['speculative_tps']:.2f} | {row['speedup']:.2f}x | "
            f"{row['peak_gb']:.2f} | {same} |"
        )
    ratios = {field: table["this"][field] / table["baseline"][field] for field in table["this"]}
    print("this / baseline: " + ", ".join(f"{field} {ratio:.3f}" for field, ratio in ratios.items()))


if __name__ == "__main__":
    main()
