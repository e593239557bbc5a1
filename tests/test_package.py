"""The package as a user installs it: a wheel built from the checkout, installed outside it, run from an empty
directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from specviz.serving.processes import CHROMIUM_ARGS, Server, free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PACKAGED = [
    "specviz/engine/loop.py",
    "specviz/serving/pairs.py",
    "specviz/ui/app.py",
    "specviz/ui/pages/round_view.py",
    "specviz/ui/streamlit.toml",
    "specviz/analysis/numerics.py",
    "specviz/runtime/cpu/kernels.h",
    "specviz/runtime/cpu/kernels_layout.c",
    "specviz/presentation/figures.py",
    "specviz/presentation/player_template.html",
    "specviz/registry/drafters.py",
    "specviz/weights/smollm2-135m-draft.safetensors",
    "specviz/weights/smollm2-135m-draft.json",
    "specviz/data/heldout_prompts.txt",
    "specviz/data/qwen-coder-wheels.sha256",
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory, measured_machine) -> tuple[Path, Path, dict[str, str]]:
    """A wheel built from a copy of the checkout (setuptools writes build/ beside what it builds), checked for the
    files it must carry, installed with ``pip --target`` outside the checkout: (site, an empty directory, the
    environment that finds the installed copy)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source, built = tmp_path / "source", tmp_path / "wheel"
    shutil.copytree(ROOT / "specviz", source / "specviz", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", source)
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(built), str(source)],
        check=True,
        cwd=tmp_path,
    )
    wheel = next(built.glob("specviz-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not [name for name in PACKAGED if name not in names]
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "-q", "--target", str(site), str(wheel)], check=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    return site, empty, {**os.environ, "PYTHONPATH": str(site)}


def test_the_wheel_installs_outside_the_checkout_and_runs_from_an_empty_directory(installed):
    site, empty, env = installed

    def run(*command: str) -> subprocess.CompletedProcess:
        done = subprocess.run(command, cwd=empty, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    where = run(sys.executable, "-c", "import specviz; print(specviz.__file__)").stdout
    assert where.startswith(str(site))  # the installed copy, not the checkout
    assert "trace" in run(sys.executable, "-m", "specviz", "--help").stdout
    run(
        sys.executable,
        "-m",
        "specviz",
        "html",
        "--prompt",
        "Name a colour.",
        "--max-new-tokens",
        "4",
        "--out",
        "x.html",
    )
    assert "trace-data" in (empty / "x.html").read_text(encoding="utf-8")
    trace = json.loads(run(str(site / "bin" / "specviz"), "trace", "--prompt", "Hi", "--max-new-tokens", "3").stdout)
    assert len(trace["output_ids"]) == 3


def test_specviz_app_serves_every_page_from_the_installed_wheel_in_an_empty_directory(installed):
    """`specviz app` from the wheel: the main script and its pages are found inside the installed package, with
    the app's streamlit options (no .streamlit folder in the empty directory)."""
    site, empty, env = installed
    server = Server(
        free_port(), env={"PYTHONPATH": env["PYTHONPATH"]}, serve=[str(site / "bin" / "specviz"), "app"], cwd=empty
    )
    try:
        server.wait_healthy()
        command = Path(f"/proc/{server.process.pid}/cmdline").read_text().split("\0")
        assert str(site / "specviz" / "ui" / "app.py") in command  # streamlit runs the installed main script
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(600_000)
            page.goto(f"{server.url}/gamma_sweep?max_new_tokens=4")
            page.get_by_role("button", name="Run the sweep").wait_for()  # a page from the installed pages/
            assert page.get_by_label("Prompt").input_value().strip()  # the shared sidebar from the main script
            assert page.locator('[data-testid="stSidebarNav"]').get_by_text("Lesson player").count() == 1
            browser.close()
    finally:
        server.stop()
