"""Benchmark: a fresh clone's first start, as its first visitor meets it (prints seconds from one run).

A server started on an empty ``$SPECVIZ_CACHE`` (nothing de-quantised, no kernel compiled, no machine profile, no
defaults: a fresh clone's first ``streamlit run app.py``) and one Chromium visitor on its first page: the seconds
until the first round is drawn in the lesson player, then until the machine's measurement, which runs after it in
the background, has stored the pair's defaults (the sidebar's "measuring" note gone on a reload).

    .venv/bin/python -m benchmarks.bench_first_start
"""

from __future__ import annotations

import tempfile
import time

from playwright.sync_api import sync_playwright

from specviz.runtime.machine import cpu_name, matrix_units_in_words
from specviz.serving.processes import CHROMIUM_ARGS, Server, free_port
from specviz.ui.controls import MEASURING_NOTE

WAIT_MS = 1_800_000  # a slow machine's first start is what is measured: no wait cuts it short


def main() -> None:
    print(f"# a first start on {cpu_name()} ({matrix_units_in_words()})")
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        server = Server(free_port(), env={"SPECVIZ_CACHE": cache})
        try:
            server.wait_healthy()
            print(f"server answers: {time.perf_counter() - started:.1f} s")
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 720})
                page.set_default_timeout(WAIT_MS)
                page.goto(server.url)
                page.frame_locator("iframe").first.locator("#title").wait_for()
                print(f"first round on the screen: {time.perf_counter() - started:.1f} s after the start")
                note = MEASURING_NOTE.split(":")[0]
                while page.get_by_text(note).count():
                    time.sleep(10)
                    page.reload()
                    page.frame_locator("iframe").first.locator("#title").wait_for()
                print(f"the machine's defaults measured and shown: {time.perf_counter() - started:.1f} s")
                browser.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
