"""The page "Your engine's numbers" in chromium, driven as a person drives it (typing, clicks, an upload): a real
llama.cpp server log pasted shows its per-position curve and the verdict, a paste cut short a message; llama-server's
/metrics and SGLang's /generate meta_info pasted in a 1280x720 window show their curves with every metric's label
whole; and the round view's downloads in vLLM's names, uploaded and pasted into the page, read back to the trace's
own numbers (its downloaded JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specviz.server_reports.figures import REPORTED

from .test_browser import chromium_page, running_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DATA = Path(__file__).parent / "data" / "engine_reports"
PASTE = "Paste what your engine printed (Ctrl+Enter reads it)"
METRIC = '[data-testid="stMetric"]'
PAGE_S = 120_000  # the page itself computes nothing costly: a generous bound on a busy 2-core machine
TRACE_S = 300_000  # the round view's trace of 16 tokens on the embedded pair


@pytest.fixture(scope="module")
def app_url(measured_machine):  # the de-quantised cache and this machine's defaults exist, as after a first start
    with running_app() as url:
        yield url


def settled_metrics(page) -> dict[str, str]:
    """The metrics once the verdict and the metrics above it are drawn: a page's elements reach the browser as they
    are built, so the verdict's text can show before the columns of metrics above it have rendered."""
    page.get_by_text("Verdict.").wait_for(timeout=PAGE_S)
    for label in ("drafted tokens", "α (i.i.d.)"):
        page.locator('[data-testid="stMetricLabel"]', has_text=label).first.wait_for(timeout=PAGE_S)
    return shown_metrics(page)


def shown_metrics(page) -> dict[str, str]:
    """Each metric's label and value, as the page shows them now."""
    return {
        metric.locator('[data-testid="stMetricLabel"]').inner_text().strip(): metric.locator(
            '[data-testid="stMetricValue"]'
        ).inner_text()
        for metric in page.locator(METRIC).all()
    }


def paste(page, text: str) -> None:
    box = page.get_by_label(PASTE)
    box.fill(text)
    box.press("Control+Enter")


def test_a_pasted_llamacpp_log_shows_its_curve_and_verdict_and_a_malformed_one_a_message(app_url):
    log = (DATA / "llamacpp_qwen_server.log").read_text()  # captured here (README): the whole server log
    with chromium_page(1400, 1100) as page:
        page.set_default_timeout(PAGE_S)  # every action bounded: a missing element fails in minutes, not hours
        page.goto(f"{app_url}/engine_report")
        page.get_by_text("Nothing read yet").wait_for(timeout=PAGE_S)
        paste(page, log)
        page.locator(".js-plotly-plot .legendtext").first.wait_for(timeout=PAGE_S)
        values = settled_metrics(page)
        read = ("drafts", "drafted tokens", "accepted tokens", "acceptance rate", "mean acceptance length")
        # its last statistics line: 27 drafts, 92 of 106 accepted, 1 + 92 / 27 = 4.41 tokens per pass at k = 4
        assert [values[label] for label in read] == ["27", "106", "92", "0.868", "4.41"]
        assert (values["k (draft length)"], values["α (i.i.d.)"]) == ("4", "0.937")  # (1 - a^5) / (1 - a) = 4.41
        legend = page.locator(".js-plotly-plot .legendtext").all_text_contents()
        assert "reported by the engine" in legend and any(t.startswith("i.i.d. theory α^i") for t in legend), legend
        assert page.locator(".js-plotly-plot .scatterlayer .trace").count() == 2  # the engine's curve and alpha^i
        assert page.locator(".js-plotly-plot .scatterlayer .point").count() == 8  # four positions each
        assert "Your acceptance is fine (alpha = 0.94)." in page.inner_text("main")
        # a paste cut inside its last counts: what was expected, no traceback, no stale curve
        paste(page, log[: log.rindex("#acc tokens =") + len("#acc tokens =")])
        message = page.locator('[data-testid="stAlert"]', has_text="'#acc tokens =' is not followed by its value")
        message.wait_for(timeout=PAGE_S)
        page.get_by_text("Verdict.").wait_for(state="detached", timeout=PAGE_S)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert (page.locator(".js-plotly-plot").count(), page.locator(METRIC).count()) == (0, 0)


def cut_labels(page) -> list[str]:
    """The metric labels the page shows cut (an element of the label narrower than its text: the ellipsis)."""
    return page.locator('[data-testid="stMetricLabel"]').evaluate_all(
        """labels => labels
            .filter(label => [label, ...label.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1))
            .map(label => label.innerText)"""
    )


def curve_points(page) -> list[float]:
    """The engine's per-position rates as the page's chart holds them (the plotted trace's y)."""
    page.locator(".js-plotly-plot .legendtext").first.wait_for(timeout=PAGE_S)
    return page.locator(".js-plotly-plot").first.evaluate(
        f"plot => Array.from(plot.data.find(trace => trace.name === '{REPORTED}').y, Number)"
    )


def test_llamacpps_metrics_and_sglangs_meta_info_show_their_curves_with_every_label_whole(app_url):
    """A laptop's 1280x720 window: each metric label whole (none cut to 'mean accepta…'), each new format's curve."""
    with chromium_page(1280, 720) as page:
        page.set_default_timeout(PAGE_S)
        page.goto(f"{app_url}/engine_report")
        page.get_by_text("Nothing read yet").wait_for(timeout=PAGE_S)
        paste(page, (DATA / "llamacpp_metrics.prom").read_text())  # llama-server's /metrics, whole (README)
        page.get_by_text("Read llama.cpp's Prometheus /metrics.").wait_for(timeout=PAGE_S)
        values = settled_metrics(page)
        read = ("drafts", "drafted tokens", "accepted tokens", "acceptance rate", "mean acceptance length")
        # 204 of 342 drafted tokens accepted over 120 drafts: 1 + 204 / 120 = 2.70 tokens per pass at k = 3
        assert [values[label] for label in read] == ["120", "342", "204", "0.596", "2.70"]
        assert values["k (draft length)"] == "3"
        assert curve_points(page) == pytest.approx([0.8, 0.55, 0.35])  # 96, 66, 42 of the 120 drafts
        assert page.locator('[data-testid="stMetricLabel"]').count() == 7
        assert cut_labels(page) == []
        # SGLang's /generate answer to two prompts: 45 of 78 proposed tokens accepted over 26 verification steps
        paste(page, (DATA / "sglang_generate.json").read_text())
        page.get_by_text("Read sglang's per-request meta_info.").wait_for(timeout=PAGE_S)
        values = settled_metrics(page)
        assert [values[label] for label in read] == ["26", "78", "45", "0.577", "2.73"]
        assert curve_points(page) == pytest.approx([22 / 26, 15 / 26, 8 / 26])  # its histograms [4, 7, 7, 8] summed
        assert cut_labels(page) == []
        assert page.locator('[data-testid="stException"]').count() == 0


def download(page, label: str) -> Path:
    with page.expect_download(timeout=PAGE_S) as started:
        page.get_by_role("button", name=label).click()
    return Path(started.value.path())


def test_the_round_views_export_reads_back_to_the_traces_numbers(app_url, tmp_path):
    with chromium_page(1400, 1100) as page:
        page.set_default_timeout(PAGE_S)
        page.goto(f"{app_url}/?max_new_tokens=16")
        page.frame_locator("iframe").first.locator("#title").wait_for(timeout=TRACE_S)
        stats = json.loads(download(page, "Download trace (JSON)").read_text())["stats"]
        prometheus = tmp_path / "specviz-vllm-metrics.prom"
        prometheus.write_bytes(download(page, "vLLM's /metrics of this run (Prometheus)").read_bytes())
        request = download(page, "vLLM's per-request metrics of this run (JSON)").read_text()
        assert stats["drafted_tokens"] > 0
        expected = {
            "drafted tokens": str(stats["drafted_tokens"]),
            "accepted tokens": str(stats["accepted_tokens"]),
            "acceptance rate": f"{stats['acceptance_rate']:.3f}",
            "mean acceptance length": f"{stats['mean_acceptance_length']:.2f}",
        }
        page.get_by_role("link", name="Your engine's numbers").click()
        page.get_by_text("Nothing read yet").wait_for(timeout=PAGE_S)
        page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(prometheus)
        page.get_by_text("Read vllm's Prometheus /metrics.").wait_for(timeout=PAGE_S)
        values = settled_metrics(page)
        assert {label: values[label] for label in expected} == expected
        # the upload removed, the per-request JSON pasted instead
        page.get_by_role("button", name=f"Remove {prometheus.name}").click()
        page.get_by_text("Nothing read yet").wait_for(timeout=PAGE_S)
        paste(page, request)
        page.get_by_text("Read vllm's per-request JSON, per step.").wait_for(timeout=PAGE_S)
        values = settled_metrics(page)
        assert {label: values[label] for label in expected} == expected
        assert page.locator('[data-testid="stException"]').count() == 0
