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

ROOT = Path(__file__).resolve().parent.parent
PACKAGED = ["specviz/engine/loop.py", "specviz/ui/work.py", "specviz/analysis/numerics.py",
            "specviz/presentation/figures.py", "specviz/presentation/player_template.html",
            "specviz/drafters/registry.py", "specviz/weights/smollm2-135m-draft.safetensors",
            "specviz/weights/smollm2-135m-draft.json", "specviz/data/heldout_prompts.txt",
            "specviz/data/qwen-coder-wheels.sha256"]


def test_the_wheel_installs_outside_the_checkout_and_runs_from_an_empty_directory(tmp_path, embedded):
    source, built = tmp_path / "source", tmp_path / "wheel"  # a copy: setuptools writes build/ beside what it builds
    shutil.copytree(ROOT / "specviz", source / "specviz", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(built),
                    str(source)], check=True, cwd=tmp_path)
    wheel = next(built.glob("specviz-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not [name for name in PACKAGED if name not in names]
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}

    def run(*command: str) -> subprocess.CompletedProcess:
        done = subprocess.run(command, cwd=empty, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    where = run(sys.executable, "-c", "import specviz; print(specviz.__file__)").stdout
    assert where.startswith(str(site))  # the installed copy, not the checkout
    assert "trace" in run(sys.executable, "-m", "specviz", "--help").stdout
    run(sys.executable, "-m", "specviz", "html", "--prompt", "Name a colour.", "--max-new-tokens", "4",
        "--out", "lesson.html")
    assert "trace-data" in (empty / "lesson.html").read_text(encoding="utf-8")
    trace = json.loads(run(str(site / "bin" / "specviz"), "trace", "--prompt", "Hi", "--max-new-tokens", "3").stdout)
    assert len(trace["output_ids"]) == 3
