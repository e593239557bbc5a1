"""Benchmark: a fresh clone's first start, as its first visitor meets it (prints seconds from one run).

A server started on an empty ``$SPECVIZ_CACHE`` (nothing de-quantised, no kernel compiled, no machine profile, no
defaults: a fresh clone's first ``streamlit run app.py``) and one Chromium visitor on its first page: the seconds
until the first round is drawn in the lesson player, then until the machine's measurement, which runs after it in
the background, has stored the pair's defaults (the sidebar's "measuring" note gone on a reload).

    .venv/bin/python -m benchmarks.bench_first_start
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

from specviz.models.machine import cpu_name, matrix_units_in_words
from specviz.ui.controls import MEASURING_NOTE

ROOT = Path(__file__).resolve().parent.parent
WAIT_MS = 1_800_000  # a slow machine's first start is what is measured: no wait cuts it short


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def main() -> None:
    print(f"# a first start on {cpu_name()} ({matrix_units_in_words()})")
    with tempfile.TemporaryDirectory() as cache:
        port = free_port()
        env = {**os.environ, "SPECVIZ_CACHE": cache, "SPECVIZ_DEVICE": "cpu"}
        command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
        started = time.perf_counter()
        server = subprocess.Popen(
            [*command, "--server.headless", "true"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            while not healthy(url):
                time.sleep(0.5)
            print(f"server answers: {time.perf_counter() - started:.1f} s")
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1280, "height": 720})
                page.set_default_timeout(WAIT_MS)
                page.goto(url)
                page.frame_locator("iframe").first.locator("#title").wait_for()
                print(f"first round on the screen: {time.perf_counter() - started:.1f} s after the start")
                note = MEASURING_NOTE.split(":")[0]
                while True:
                    page.reload()
                    page.frame_locator("iframe").first.locator("#title").wait_for()
                    if page.get_by_text(note).count() == 0:
                        break
                    time.sleep(10)
                print(f"the machine's defaults measured and shown: {time.perf_counter() - started:.1f} s")
                browser.close()
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
