"""How long one step of the lesson player takes in real Chromium: key press -> next round fully drawn.

Usage: ``.venv/bin/python -m benchmarks.bench_player [--tokens 64] [--rule sample]``

Decodes the embedded default pair once, writes the standalone lesson file, opens it from file://
and presses → through every round; each step is timed inside the page from the key event to the
second animation frame after it (the round's rows, marks and bars are then painted). Prints the
median, p95 and max. A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from specviz.config import DecodeConfig
from specviz.engine import load_pair, speculative_decode
from specviz.presentation.player import lesson_html

STEP = """() => new Promise((done) => {
  const started = performance.now();
  document.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowRight", bubbles: true}));
  requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - started)));
})"""


def main(tokens: int, rule: str) -> None:
    config = DecodeConfig(device="cpu", max_new_tokens=tokens, rule=rule, temperature=0.7 if rule == "sample" else 1.0)
    trace = speculative_decode(
        config, prompt="Explain speculative decoding to a student in three sentences.", pair=load_pair(config)
    )
    path = Path(tempfile.mkdtemp()) / "lesson.html"
    path.write_text(lesson_html(trace), encoding="utf-8")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(path.as_uri())
        page.wait_for_selector("#seed .sv-rows")
        steps = [page.evaluate(STEP) for _ in range(len(trace.rounds) - 1)]
        if not page.locator("#title").inner_text().startswith(f"Round {len(trace.rounds)} of {len(trace.rounds)}:"):
            raise SystemExit("the player did not step to the last round")
        browser.close()
    steps.sort()
    print(
        f"lesson player, {len(trace.rounds)} rounds ({tokens} tokens, rule {rule}), "
        f"{path.stat().st_size / 1e3:.0f} kB file"
    )
    print(
        f"step (key -> next round painted): median {statistics.median(steps):.1f} ms, "
        f"p95 {steps[int(0.95 * (len(steps) - 1))]:.1f} ms, max {steps[-1]:.1f} ms over {len(steps)} steps"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rule", choices=("greedy", "sample", "topbeta"), default="sample")
    args = parser.parse_args()
    main(args.tokens, args.rule)
