"""Benchmark: the race, as the Race page measures it, on held-out prompts (prints each race's speedup).

Per pair: the app's fastest exact configuration measured on this machine for the target's precision (the draft's
precision and γ, ``analysis.defaults.fastest_config``), raced against the target alone on each held-out prompt, one
after the other in one process (as the server's worker does): each race's lanes' wall times, their ratio, whether
the lanes' steps agreed with the quiet profile (load signs), and whether the texts were identical; beside it the
speedup the pages predict for that run from this machine's profile (``metrics.machine_speedup``: the theory at the
trace's alpha and blocks, predicted with the profile's c and v(k)) and the race over the prediction. The median race
is the figure the pages quote; the medians' ratio says whether the profile and the race agree (within 25%).

    .venv/bin/python -m benchmarks.bench_race [--pairs embedded,qwen-coder] [--prompts 4] [--max-new 48]
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.bench_machine import PAIRS, pair_config
from specviz import DATA_DIR
from specviz.analysis.defaults import fastest_config, stored_defaults
from specviz.analysis.metrics import machine_speedup
from specviz.analysis.race import run_race
from specviz.engine import load_pair, speculative_decode
from specviz.runtime.machine import cpu_name, matrix_units_in_words
from specviz.training.teacher_text import read_prompt_file


def bench(name: str, dtype: str, prompts: int, max_new: int) -> None:
    config, chosen, _ = fastest_config(pair_config(name, dtype, max_new))
    pair = load_pair(config)
    own = stored_defaults(config.target, config.draft, config.device)
    quiet = "a replay of quiet profiles" if own is not None and not own.busy else "NOT a quiet replay"
    print(f"\n## {name}, target in {dtype}: {chosen} ({quiet})")
    speedups, predictions = [], []
    for prompt in read_prompt_file(DATA_DIR / PAIRS[name][2])[:prompts]:
        race = run_race([(config, pair)], prompt)  # first: the decode that predicts it warms nothing the race times
        c, predicted = machine_speedup(speculative_decode(config, prompt=prompt, pair=pair), pair)
        target, speculative = race.lanes
        speedups.append(race.headline)
        predictions.append(predicted)
        print(
            f"  target alone {target.total_ms / 1e3:6.2f} s · speculative {speculative.total_ms / 1e3:6.2f} s · "
            f"{race.headline:.2f}x · predicted {predicted:.2f}x (c = {c:.3f}) · race / predicted "
            f"{race.headline / predicted:.2f} · drafting {100 * speculative.drafting_share:.0f}% · "
            f"{race.agreements[0].split(':')[0]} · {'load: ' + race.load[0] if race.load else 'quiet'}"
        )
    raced, predicted = statistics.median(speedups), statistics.median(predictions)
    agree = "within" if abs(raced / predicted - 1) <= 0.25 else "NOT within"
    print(
        f"  median race: {raced:.2f}x over {len(speedups)} prompts; predicted {predicted:.2f}x; race / predicted "
        f"{raced / predicted:.2f} ({agree} 25%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default="embedded,qwen-coder")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-new", type=int, default=48)
    args = parser.parse_args()
    print(f"# races on {cpu_name()} ({matrix_units_in_words()})")
    for name in args.pairs.split(","):
        for dtype in args.dtypes.split(","):
            bench(name, dtype, args.prompts, args.max_new)


if __name__ == "__main__":
    main()
