"""llama.cpp's pass over k tokens (specviz.analysis.llamacpp_passes): read from llama-bench's real JSON output
(captured on this project's Cascade Lake machine from the Qwen2.5-Coder 1.5B Q4_K_M GGUF), kept per machine, shown on
the roofline view."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specviz.analysis.llamacpp_passes import (
    LlamaCppPasses,
    llamacpp_passes_file,
    read_llama_bench,
    store_llamacpp_passes,
    stored_llamacpp_passes,
)
from specviz.runtime.machine import cpu_name

from .test_pages import open_page, params  # noqa: F401  (the tiny pair's link)

CAPTURE = Path(__file__).parent / "data" / "llama_bench" / "qwen15b_q4km_passes.json"


def test_llama_benchs_json_gives_each_pass_and_its_cost_in_steps():
    records = json.loads(CAPTURE.read_text(encoding="utf-8"))
    passes = read_llama_bench(CAPTURE.read_text(encoding="utf-8"), "2026-11-26T20:30:00+00:00")
    assert passes.tokens == (1, 2, 3, 4, 5, 6) and passes.threads == 2
    assert passes.model == "qwen2 1.5B Q4_K - Medium"
    by_size = {r["n_prompt"]: r["avg_ns"] / 1e6 for r in records}
    assert passes.pass_ms == tuple(by_size[k] for k in passes.tokens)
    relative = passes.relative()
    assert relative[0] == 1.0 and relative[5] == pytest.approx(by_size[6] / by_size[1])
    assert relative[5] > 2  # on this capture a pass over 6 tokens costs more than two one-token steps: not flat


@pytest.mark.parametrize(
    "text,said",
    [
        ("{not json", "not llama-bench's JSON"),
        ('{"n_prompt": 1}', "a list of records"),
        ('[{"n_prompt": 0, "n_gen": 128, "avg_ns": 1}]', "-n 0"),
        ('[{"n_prompt": 4, "n_gen": 0, "avg_ns": 1, "model_type": "m", "n_threads": 2}]', "one-token pass"),
    ],
)
def test_other_output_is_refused_with_what_was_expected(text, said):
    with pytest.raises(ValueError, match=said):
        read_llama_bench(text, "now")


@pytest.fixture
def stored_capture():
    """The capture kept as this machine's (a real file in the cache), the file as it was put back after."""
    path = llamacpp_passes_file()
    before = path.read_bytes() if path.exists() else None
    passes = dataclasses.replace(read_llama_bench(CAPTURE.read_text(encoding="utf-8"), "2026-11-26"), cpu=cpu_name())
    store_llamacpp_passes(passes)
    yield passes
    if before is None:
        path.unlink()
    else:
        path.write_bytes(before)


def test_the_passes_are_kept_for_this_cpu_only(stored_capture):
    assert stored_llamacpp_passes() == stored_capture
    store_llamacpp_passes(dataclasses.replace(stored_capture, cpu="another CPU"))
    assert stored_llamacpp_passes() is None


@pytest.mark.slow
def test_the_roofline_view_shows_llama_cpps_passes_when_measured_here(params, stored_capture):  # noqa: F811
    at = open_page(params, "parallel_verification")
    assert not at.exception and not at.error
    said = next(m.value for m in at.markdown if m.value.startswith("llama.cpp on this CPU"))
    assert "qwen2 1.5B Q4_K - Medium" in said and f"costs {stored_capture.relative()[-1]:.1f} of its" in said
    table = next(d.value for d in at.dataframe if "llama.cpp v(k), steps" in d.value.columns)
    assert list(table["tokens in the pass"]) == list(stored_capture.tokens)
    assert list(table["llama.cpp, ms"]) == [round(ms, 2) for ms in stored_capture.pass_ms]


@pytest.fixture
def no_stored_passes():
    """This machine's cache without a measurement of llama.cpp's passes, the file as it was put back after."""
    path = llamacpp_passes_file()
    before = path.read_bytes() if path.exists() else None
    path.unlink(missing_ok=True)
    yield
    if before is not None:
        path.write_bytes(before)


@pytest.mark.slow
def test_a_machine_without_a_measurement_shows_none(params, no_stored_passes):  # noqa: F811
    at = open_page(params, "parallel_verification")
    assert not at.exception and not at.error
    assert not any(m.value.startswith("llama.cpp on this CPU") for m in at.markdown)


def test_a_record_reads_back_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    passes = LlamaCppPasses("m", cpu_name(), 2, (1, 2), (10.0, 12.5), "2026-11-26")
    store_llamacpp_passes(passes)
    assert stored_llamacpp_passes() == passes and stored_llamacpp_passes().relative() == (1.0, 1.25)
