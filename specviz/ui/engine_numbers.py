"""The views of "Your engine's numbers" (the engine's text pasted or uploaded, what was read, the user's costs, the
explanation), and the downloads that speak the engines' language on every trace and race: the run's metrics under
vLLM's names (:mod:`specviz.server_reports.export`), which that page reads back."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import pandas as pd
import streamlit as st

from specviz.analysis.cost import quiet_cost_ratio
from specviz.config import DecodeConfig
from specviz.limits import ENGINE_REPORT_BYTES_MAX
from specviz.models.profile import held_profile
from specviz.server_reports.explain import GAMMA_MAX, Explanation
from specviz.server_reports.export import DraftingRun, vllm_prometheus, vllm_request_json
from specviz.server_reports.figures import per_position_figure
from specviz.server_reports.reading import ENGINES, read_engine_report
from specviz.server_reports.record import EngineReport
from specviz.settings import ConfigError
from specviz.ui.state import page_key
from specviz.ui.waiting import page_pair, show_user_errors

PAGE = "engine_report"
RECOGNISE = "recognise it"


def engine_text() -> tuple[str | None, str | None]:
    """The pasted text or the uploaded file's (the upload wins while one is there), and the engine the user says
    printed it (None: recognise it); a file too large or not text says so and gives no text."""
    engine = st.selectbox(
        "Which engine printed it", (RECOGNISE, *ENGINES), key=page_key(PAGE, "engine"), help="; ".join(ENGINES.values())
    )
    pasted = st.text_area(
        "Paste what your engine printed (Ctrl+Enter reads it)",
        height=180,
        max_chars=ENGINE_REPORT_BYTES_MAX,
        key=page_key(PAGE, "pasted"),
        placeholder="e.g. vllm:spec_decode_num_drafts_total{...} 100.0 (or llamacpp:spec_decode_...), a "
        "'SpecDecoding metrics:' line, llama.cpp's 'draft acceptance = ...' line or SGLang's /generate JSON",
    )
    uploaded = st.file_uploader(
        "… or upload the file (a saved /metrics page, a log, a response's JSON)", key=page_key(PAGE, "file")
    )
    chosen = None if engine == RECOGNISE else engine
    if uploaded is None:
        return (pasted if pasted.strip() else None), chosen
    if uploaded.size > ENGINE_REPORT_BYTES_MAX:
        st.error(f"{uploaded.name} is {uploaded.size:,} bytes: a report is text of at most {ENGINE_REPORT_BYTES_MAX:,}")
        return None, chosen
    try:
        text = uploaded.getvalue().decode("utf-8")
    except UnicodeDecodeError:
        st.error(f"{uploaded.name} is not text (UTF-8): expected {'; '.join(ENGINES.values())}")
        return None, chosen
    st.caption(f"Reading the uploaded **{uploaded.name}** (remove it to read the pasted text).")
    return text, chosen


def read_report(text: str, engine: str | None) -> EngineReport | None:
    """The report in ``text``, or None with the reader's message (what was expected) in the page."""
    try:
        return read_engine_report(text, engine)
    except ConfigError as exc:
        st.error(str(exc))
        return None


def shown(value: float | int | None, form: str = "{}") -> str:
    return "—" if value is None else form.format(value)


def show_what_was_read(report: EngineReport) -> None:
    st.markdown(f"Read **{report.engine}**'s {report.source}.")
    cells = (
        ("drafts", shown(report.drafts), "drafting rounds, each verified by one target pass"),
        ("drafted tokens", shown(report.draft_tokens), None),
        ("accepted tokens", shown(report.accepted_tokens), None),
        ("acceptance rate", shown(report.acceptance_rate, "{:.3f}"), "accepted / drafted tokens"),
        ("mean acceptance length", shown(report.mean_acceptance_length, "{:.2f}"), "tokens per target pass, bonus in"),
        ("k (draft length)", shown(report.draft_length), "the most tokens a draft holds"),
    )
    for row in (cells[:3], cells[3:]):  # three a row: six abreast cut 'mean acceptance length' in a laptop's window
        for column, (label, value, meaning) in zip(st.columns(len(row)), row):
            column.metric(label, value, help=meaning)


@dataclass(frozen=True)
class Costs:
    """The user's costs: k where the report has none, c, the block sizes to estimate and v(k) (one for all, or one per
    block size)."""

    draft_length: int | None
    c: float | None
    gammas: tuple[int, ...]
    verify_costs: tuple[float, ...]


def costs(report: EngineReport, config: DecodeConfig | None) -> Costs:
    """The cost widgets: entered, or c and v(k) measured on this server for the sidebar's pair."""
    left, middle, right = st.columns(3)
    k = report.draft_length or left.number_input(
        "k: tokens per draft (num_speculative_tokens, --draft-max)",
        min_value=1,
        max_value=GAMMA_MAX,
        value=None,
        key=page_key(PAGE, "k"),
        help="the engine's text does not say it; alpha is fitted to the mean acceptance length at this k",
    )
    gammas = tuple(
        middle.multiselect(
            "γ to estimate (none chosen: the engine's k)", range(1, GAMMA_MAX + 1), key=page_key(PAGE, "gammas")
        )
    )
    predicted = gammas or ((k,) if k else ())
    measure = right.toggle(
        "Measure c and v(k) here, for the sidebar's pair", key=page_key(PAGE, "measure"), disabled=config is None
    )
    if measure and config is not None:
        measured = show_user_errors(lambda: measured_costs(config, predicted))
        if measured is not None:
            return Costs(k, measured[0], gammas, measured[1])
    c = left.number_input(
        "c: your draft's step over your target's",
        min_value=0.0,
        value=None,
        step=0.05,
        format="%.3f",
        key=page_key(PAGE, "c"),
        help="one draft token's time over one target token's (python -m specviz machine prints it for a pair)",
    )
    v = middle.number_input(
        "v(k): the target's pass over k + 1 tokens, in one-token steps",
        min_value=0.01,
        value=1.0,
        step=0.05,
        key=page_key(PAGE, "v"),
        help="1: verifying k tokens costs one step (Leviathan et al.'s assumption); the Parallel verification page "
        "measures it",
    )
    return Costs(k, c, gammas, (v,))


def measured_costs(config: DecodeConfig, gammas: tuple[int, ...]) -> tuple[float, tuple[float, ...]] | None:
    """c and v(gamma) from this machine's profile of the sidebar's pair (the numbers every speed page uses), said in
    the page; None (with why) where the sidebar's drafter has no draft of its own to time."""
    pair = page_pair(config)
    if pair is None:
        return None
    with st.spinner("Measuring the pair's passes on this machine (once; seconds) …"):
        c = quiet_cost_ratio(config, pair)
        profile = held_profile(pair.target)
    if c is None:
        st.warning("The sidebar's drafter has no draft model of its own to time here: enter c instead.")
        return None
    verify = tuple(profile.verify_cost(g) for g in gammas)
    said = ", ".join(f"v({g}) = {v:.2f}" for g, v in zip(gammas, verify))
    pair_words = f"{config.target} in {config.dtype} ← {config.draft or config.drafter} in {config.draft_precision}"
    st.caption(f"Measured on this server for {pair_words}: c = {c:.3f}; {said}.")
    return c, verify


def show_explanation(explained: Explanation) -> None:
    alpha = shown(explained.alpha, "{:.3f}")
    st.metric("α (i.i.d.)", alpha, help=explained.alpha_how)
    st.caption(f"α: {explained.alpha_how}.")
    if explained.positions:
        st.plotly_chart(per_position_figure(explained), width="stretch", key=page_key(PAGE, "curve"))
    else:
        st.info("This output reports no acceptance per draft position, so there is no curve to draw.")
    st.markdown(f"**Verdict.** {explained.sentence}")
    if explained.predictions:
        table = pd.DataFrame(
            [
                {
                    "γ": p.gamma,
                    "v(γ)": p.verify_cost,
                    "tokens per pass": p.tokens_per_pass,
                    "cost, target steps": p.cost,
                    "speedup": p.speedup,
                }
                for p in explained.predictions
            ]
        )
        st.dataframe(table.round(3), hide_index=True)
    else:
        st.caption("Enter c (your draft's cost) to estimate the speedup this α buys.")


def export_downloads(run: DraftingRun, where: str) -> None:
    """The run's metrics as vLLM would report them (``/metrics`` and the per-request JSON), for the
    "Your engine's numbers" page to read back; ``where`` keeps each run's buttons apart on one page."""
    exports = (
        ("vLLM's /metrics of this run (Prometheus)", vllm_prometheus, "metrics.prom", "text/plain", "prometheus"),
        (
            "vLLM's per-request metrics of this run (JSON)",
            vllm_request_json,
            "request.json",
            "application/json",
            "request",
        ),
    )
    for column, (label, render, name, mime, kind) in zip(st.columns(2), exports):
        column.download_button(
            label,
            partial(render, run),
            f"specviz-vllm-{name}",
            mime,
            key=page_key("export", f"{where}_{kind}"),
            on_click="ignore",
        )
