"""The GPU check's own parts, on the CPU (``python -m benchmarks.gpu_check``; the check itself runs on a GPU): its
figures are written after every section and a failing section does not lose the others, its comparison of two greedy
outputs names where they part and how near a tie the target was there, and its options leave out what they say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specviz.analysis.check_report import SectionReport, first_divergence, top2_margin

ROOT = Path(__file__).resolve().parent.parent


def test_the_report_is_written_after_each_section_and_a_failing_one_loses_nothing(tmp_path):
    report = SectionReport(tmp_path / "check.json")
    with report.section("machine") as result:
        result["device"] = "a GPU"
    written = json.loads((tmp_path / "check.json").read_text())
    assert written["sections"]["machine"]["device"] == "a GPU" and written["sections"]["machine"]["seconds"] >= 0
    with report.section("table") as result:
        result["rows"] = [1]
        raise RuntimeError("out of memory")
    with report.section("exactness") as result:
        result["failures"] = []
    written = json.loads((tmp_path / "check.json").read_text())
    assert list(written["sections"]) == ["machine", "table", "exactness"]  # the check went on after the failure
    assert written["sections"]["table"]["rows"] == [1]  # what the failing section measured before it failed
    assert written["failures"] == ["table: RuntimeError: out of memory"]


def test_two_greedy_outputs_part_where_their_first_token_differs():
    assert first_divergence([5, 6, 7], [5, 6, 7]) is None
    assert first_divergence([5, 6, 7], [5, 9, 7]) == 1
    assert first_divergence([5, 6], [5, 6, 7]) == 2  # one ended (an EOS) where the other went on
    assert top2_margin(torch.tensor([1.0, 4.0, 3.998, -2.0])) == pytest.approx(0.002, abs=1e-6)


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the check runs for real")
def test_the_check_says_where_there_is_no_gpu_and_its_options_leave_out_what_they_name(tmp_path):
    out = tmp_path / "check.json"
    refused = check("--out", str(out))
    assert refused.returncode == 2 and "no CUDA GPU here" in refused.stderr and not out.exists()
    skipped = check("--device", "cpu", "--pairs", "none", "--skip-pages", "--out", str(out))
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads(out.read_text()) == {"sections": {}, "failures": []}  # no pair named, the pages left out
