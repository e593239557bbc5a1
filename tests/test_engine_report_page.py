"""The page "Your engine's numbers" through AppTest (its logic; tests/test_engine_report_browser.py drives it in
chromium): an engine's text pasted or uploaded, what was read, the curve against alpha^i, the verdict at the user's c
and v(k) or this server's, bad input as a message; and the app's own export of a trace read back to its numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specviz.analysis.cost import quiet_cost_ratio
from specviz.config import DecodeConfig
from specviz.engine import load_pair, speculative_decode
from specviz.models.profile import model_profile
from specviz.server_reports.explain import explain
from specviz.server_reports.export import drafting_run, vllm_prometheus, vllm_request_json
from specviz.server_reports.figures import REPORTED, THEORY, per_position_figure
from specviz.server_reports.reading import read_engine_report
from specviz.ui.state import page_key

from .test_app import make_app

pytestmark = [pytest.mark.slow]  # it runs the app (or loads the embedded pair): the whole suite's lane

DATA = Path(__file__).parent / "data" / "engine_reports"
LLAMA_LOG = (DATA / "llamacpp_server.log").read_text()  # 90 of 150 accepted, mean len 2.80, (0.76, 0.64, 0.40)


def key(name: str) -> str:
    return page_key("engine_report", name)


@pytest.fixture
def page(tiny_params):
    at = make_app(tiny_params).run()
    at.switch_page("pages/engine_report.py").run()
    assert not at.exception, at.exception
    return at


def paste(at, text: str, engine: str | None = None):
    if engine is not None:
        at.selectbox(key=key("engine")).set_value(engine)
    at.text_area(key=key("pasted")).input(text).run()
    assert not at.exception, at.exception
    return at


def shown(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_a_pasted_llamacpp_log_shows_what_was_read_its_curve_and_the_verdict(page):
    assert any(i.value.startswith("Nothing read yet") for i in page.info)
    at = paste(page, LLAMA_LOG)
    assert not at.error, [e.value for e in at.error]
    values = shown(at)
    assert {k: values[k] for k in ("drafts", "drafted tokens", "accepted tokens", "k (draft length)")} == {
        "drafts": "—",  # the server prints no draft count
        "drafted tokens": "150",
        "accepted tokens": "90",
        "k (draft length)": "3",
    }
    assert (values["acceptance rate"], values["mean acceptance length"]) == ("0.600", "2.80")  # 90 / 150; printed
    explained = explain(read_engine_report(LLAMA_LOG))
    assert values["α (i.i.d.)"] == f"{explained.alpha:.3f}"
    lines = {line.get("name", ""): line for line in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]}
    assert lines[REPORTED]["y"] == [0.76, 0.64, 0.4]
    theory = next(line for name, line in lines.items() if name.startswith(THEORY))
    assert theory["y"] == pytest.approx([explained.alpha**i for i in (1, 2, 3)])
    verdicts = [m.value for m in at.markdown if m.value.startswith("**Verdict.**")]
    assert verdicts == [f"**Verdict.** {explained.sentence}"]
    # the user's c and block size: gamma 5 at c = 0.6 yields 3.41 tokens for 4 target steps
    at.number_input(key=key("c")).set_value(0.6)
    at.multiselect(key=key("gammas")).set_value([5]).run()
    verdict = next(m.value for m in at.markdown if m.value.startswith("**Verdict.**"))
    assert verdict == f"**Verdict.** {explain(read_engine_report(LLAMA_LOG), 0.6, (5,), (1.0,)).sentence}"
    assert "your draft costs c = 0.6 of a target step, so gamma 5 cannot pay" in verdict
    table = at.dataframe[0].value
    assert list(table["γ"]) == [5] and table["speedup"][0] == pytest.approx(3.41 / 4.0, abs=0.01)


@pytest.mark.parametrize(
    ("text", "engine", "message"),
    [
        ("just some words", None, "not a speculative decoding report this app reads: expected vLLM's /metrics"),
        (LLAMA_LOG[: LLAMA_LOG.index("(   90 accepted") + 5], None, "expected 'draft acceptance = R (N accepted"),
        ((DATA / "vllm_metrics.prom").read_text(), "sglang", "this text reads as vllm's /metrics text"),
        ((DATA / "vllm_metrics.prom").read_text().replace("} 200.0", "} -200.0"), None, "cannot be negative"),
        ((DATA / "vllm_request.json").read_text().replace("[2, 2, 1, 3]", "[2, 3, 0, 3]"), None, "holds 12"),
        ((DATA / "vllm_request.json").read_text()[:200], None, "does not parse at line"),
    ],
)
def test_bad_input_is_a_message_saying_what_was_expected(page, text, engine, message):
    at = paste(page, text, engine)
    assert [e.value for e in at.error if message in e.value], [e.value for e in at.error]
    assert not at.get("plotly_chart") and not [m for m in at.markdown if m.value.startswith("**Verdict.**")]


def test_an_uploaded_file_is_read_and_wins_over_the_paste(page):
    at = paste(page, LLAMA_LOG)
    metrics = (DATA / "vllm_metrics.prom").read_bytes()
    at.file_uploader(key=key("file")).set_value(("metrics.prom", metrics, "text/plain")).run()
    assert not at.exception and not at.error
    assert any("Reading the uploaded **metrics.prom**" in c.value for c in at.caption)
    values = shown(at)
    assert (values["drafts"], values["drafted tokens"], values["accepted tokens"]) == ("100", "400", "200")
    at.file_uploader(key=key("file")).set_value(("picture.png", b"\x89PNG\r\n\x1a\n\xff\xfe", "image/png")).run()
    said = [e.value for e in at.error]
    assert len(said) == 1 and said[0].startswith("picture.png is not text (UTF-8): expected vLLM's /metrics text")


def test_c_and_v_measured_here_for_the_sidebars_pair(page, tiny_dirs):
    at = paste(page, LLAMA_LOG)
    at.toggle(key=key("measure")).set_value(True).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    measured = next(m.value for m in at.caption if m.value.startswith("Measured on this server"))
    dtype, draft_dtype = re.search(r" in (\w+) ← .* in (\w+): c = ", measured).groups()  # the pair's measured defaults
    config = DecodeConfig(
        target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", device="cpu", dtype=dtype
    ).replace(draft_dtype=draft_dtype)
    pair = load_pair(config)
    c, v = quiet_cost_ratio(config, pair), model_profile(pair.target).verify_cost(3)
    assert f"c = {c:.3f}; v(3) = {v:.2f}." in measured
    verdict = next(m.value for m in at.markdown if m.value.startswith("**Verdict.**"))
    assert verdict == f"**Verdict.** {explain(read_engine_report(LLAMA_LOG), c, (), (v,)).sentence}"
    assert not [n for n in at.number_input if n.key == key("c")]  # measured: nothing to enter


def test_the_round_views_export_reads_back_here_to_the_traces_numbers(tiny_params, tiny_dirs, tiny_pair):
    at = make_app(tiny_params).run()
    assert not at.exception
    labels = [b.label for b in at.get("download_button")]
    assert "vLLM's /metrics of this run (Prometheus)" in labels
    assert "vLLM's per-request metrics of this run (JSON)" in labels
    player = make_app(tiny_params).run().switch_page("pages/lesson_player.py").run()
    assert [b.label for b in player.get("download_button") if b.label.startswith("vLLM's")] == labels[-2:]
    config = DecodeConfig(
        target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", max_new_tokens=12, gamma=3, device="cpu"
    )
    trace = speculative_decode(config, prompt=tiny_params["prompt"], pair=tiny_pair)  # the page's trace, recomputed
    stats = trace.stats
    at.switch_page("pages/engine_report.py").run()
    for text in (vllm_prometheus(drafting_run(trace)), vllm_request_json(drafting_run(trace))):
        values = shown(paste(at, text))
        assert not at.error, [e.value for e in at.error]
        assert values["drafted tokens"] == str(stats.drafted_tokens)
        assert values["accepted tokens"] == str(stats.accepted_tokens)
        assert values["acceptance rate"] == f"{stats.acceptance_rate:.3f}"
        assert values["mean acceptance length"] == f"{stats.mean_acceptance_length:.2f}"


def test_the_curve_names_the_position_where_it_falls_off_a_cliff():
    # 100 drafts of 4: 0.9, 0.81, then 0.10: the third position accepted 12% of the time once the two before passed
    line = (
        "SpecDecoding metrics: Mean acceptance length: 2.86, Accepted: 186 tokens, Drafted: 400 tokens, "
        "Per-position acceptance rate: 0.900, 0.810, 0.100, 0.050"
    )
    explained = explain(read_engine_report(line))
    figure = per_position_figure(explained)
    assert [a.text for a in figure.layout.annotations] == ["cliff at position 3"]
    assert figure.layout.annotations[0].x == 3 and figure.layout.annotations[0].y == 0.1
    bars = next(trace for trace in figure.data if trace.type == "bar")
    assert bars.y == pytest.approx((0.9, 0.9, 0.1 / 0.81, 0.5))  # each position given the ones before it
