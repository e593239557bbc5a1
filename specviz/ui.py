"""Streamlit glue (the only module that imports streamlit): cached loaders, controls, URL state.

Models are loaded once per process with ``st.cache_resource`` and shared by every session; every
page's computation (traces, sweeps, comparisons, lab runs) goes through one process-wide
:class:`~specviz.sharedwork.SharedWork`: computed once however many sessions ask, queued fairly,
kept in a store bounded by bytes. Every user error becomes a message in the page, never a traceback.
"""

from __future__ import annotations

import logging
import os
import time
from functools import partial

import streamlit as st
import torch
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from .config import BETA_MAX, GAMMA_MAX, MAX_NEW_TOKENS_MAX, TREE_MODES, ConfigError, DecodeConfig
from .engine import ModelPair, load_pair, speculative_decode, uses_draft_model
from .models import EMBEDDED, ModelLoadError, VocabularyMismatchError
from .sharedwork import Place, SharedWork
from .trace import Trace
from .urlstate import parse_query, to_query

log = logging.getLogger(__name__)

EMBEDDED_PAIR = "Embedded: SmolLM2-135M-Instruct + its distilled 4-layer draft (runs offline)"
CUSTOM_PAIR = "Custom model ids or directories"
PAIR_PRESETS = {  # label -> (target, draft); the hub pairs share a tokenizer within each family
    EMBEDDED_PAIR: (EMBEDDED, None),
    "SmolLM2-135M → SmolLM2-360M-Instruct": ("HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "SmolLM2-135M → SmolLM2-1.7B-Instruct": ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "Qwen2.5-0.5B → Qwen2.5-1.5B-Instruct": ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    "Qwen2.5-0.5B → Qwen2.5-7B-Instruct": ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    "distilgpt2 → gpt2-large": ("gpt2-large", "distilgpt2"),
    CUSTOM_PAIR: None,
}
PROMPT_PRESETS = {
    "Translation (seed 000)": "Translate to English: Machen sich Hunderte Millionen von Autofahrern Sorgen über ihre Privatsphäre?",
    "Explain": "Explain speculative decoding to a student in three sentences.",
    "Code": "Write a Python function that returns the n-th Fibonacci number.",
    "List": "List the days of the week, one per line.",
    "Story": "Once upon a time, in a small village by the sea,",
}
DEFAULT_PROMPT = PROMPT_PRESETS["Translation (seed 000)"]
USER_ERRORS = (ConfigError, ModelLoadError, VocabularyMismatchError)
STORE_MAX_BYTES = int(float(os.environ.get("SPECVIZ_STORE_MB", "1024")) * 2**20)  # finished results kept, by size
WORKERS = max(1, int(os.environ.get("SPECVIZ_WORKERS", "1")))  # computations running at once in this process
POLL_SECONDS = 0.25  # how often a waiting page refreshes its place in the queue


def app_defaults() -> DecodeConfig:
    """The app's defaults; the device comes from $SPECVIZ_DEVICE (auto: the GPU when there is one)."""
    return DecodeConfig(device=os.environ.get("SPECVIZ_DEVICE", "auto"))


# ------------------------------------------------------------------------------------------------
# Cached models and traces


@st.cache_resource(show_spinner=False, max_entries=6)
def cached_pair(target: str, draft: str | None, drafter: str, device: str) -> ModelPair:
    return load_pair(DecodeConfig(target=target, draft=draft, drafter=drafter, device=device))


def _draft_spec(config: DecodeConfig) -> str | None:
    return config.draft_spec if uses_draft_model(config) else None


def describe_failure(exc: BaseException) -> str:
    """The message a page shows for a failed computation (user errors verbatim, the rest summarised)."""
    if isinstance(exc, USER_ERRORS):
        return str(exc)
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return ("Out of memory: this model pair, prompt or max new tokens is too large for this machine. "
                "Pick smaller models or fewer tokens.")
    log.error("computation failed", exc_info=exc)
    return f"Computation failed: {type(exc).__name__}: {str(exc)[:300]}"


@st.cache_resource(show_spinner=False)
def shared_work() -> SharedWork:
    """The process's one pool of shared computations (see :mod:`specviz.sharedwork`)."""
    return SharedWork(STORE_MAX_BYTES, WORKERS, describe_failure)


def trace_key(config: DecodeConfig, prompt: str, *extra) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in config.to_dict().items())) + (("prompt", prompt),) + extra


def show_user_errors(fn):
    """Run ``fn()``; turn any failure into a message in the page (the app keeps serving). None on failure."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the page must keep serving; the log keeps the traceback
        st.error(describe_failure(exc))
    return None


def pair_for(config: DecodeConfig) -> ModelPair:
    """The process's shared model pair for ``config`` (a spinner when a page, not a worker, loads it)."""
    load = partial(cached_pair, config.target, _draft_spec(config), config.drafter, config.device)
    if get_script_run_ctx(suppress_warning=True) is None:
        return load()
    with st.spinner(f"Loading {config.target}" + (f" and {config.draft}" if _draft_spec(config) else "") + " …"):
        return load()


def _session_id() -> str:
    ctx = get_script_run_ctx(suppress_warning=True)
    return ctx.session_id if ctx is not None else "no-session"


def _show_place(box, place: Place, label: str) -> None:
    """Tell a waiting page where its computation stands: its place in line, or the shared progress."""
    if place.state == "queued":
        wait = "estimating the wait" if place.wait_s is None else f"~{place.wait_s:.0f} s"
        runs = "run" if place.ahead == 1 else "runs"
        box.info(f"{label}: waiting in line, {place.ahead} {runs} ahead of yours, {wait}. "
                 "Change a setting to cancel.", icon="⏳")
        return
    done, total, text = place.progress
    others = place.sharers - 1
    shared = f" · shared with {others} other session{'s' if others != 1 else ''}" if others > 0 else ""
    box.progress(min(1.0, done / max(1, total)), text=f"{text or label}{shared}")


def known(key: tuple) -> bool:
    """Whether ``key``'s result is stored or being computed (a page then shows it without a button press)."""
    return shared_work().known(key)


def remembered(key: tuple, compute, label: str):
    """The shared result for ``key``, computed once for every session that asks (None on failure).

    ``compute(on_progress)`` runs on the process's work pool (:class:`SharedWork`): identical requests
    wait for one run, distinct ones queue first come first served, and the page shows its place in
    line or the run's progress until the result (or the failure's message) arrives. A rerun (the user
    changed a setting) or a closed tab leaves the queue.
    """
    work = shared_work()
    cached = work.cached(key)
    if cached is not None:
        return cached
    session = _session_id()
    job = work.submit(key, compute, session, label)
    box = st.empty()
    try:
        while not job.finished.wait(POLL_SECONDS):
            _show_place(box, work.place(job), label)
    finally:
        work.leave(job, session)
    box.empty()
    if job.error is not None:
        st.error(job.error)
        return None
    return job.result


def get_trace(config: DecodeConfig, prompt: str) -> Trace | None:
    """The cached trace, or a fresh run with a progress bar over rounds; failures become messages."""

    def compute(on_progress) -> Trace:
        config.validated()
        pair = pair_for(config)
        return speculative_decode(config, prompt=prompt, pair=pair, on_round=lambda record, new: on_progress(
            new, config.max_new_tokens, f"Round {record.index + 1} · {new}/{config.max_new_tokens} tokens"))

    return remembered(trace_key(config, prompt), compute, "Decoding")


PAGE_CONFIG = dict(page_title="specviz: speculative decoding, seen", page_icon="✓", layout="wide")


def draw_shared_sidebar() -> None:
    """Draw the sidebar once per run (app.py does it before running the page) and keep its result."""
    defaults = app_defaults()
    config, prompt = sidebar_controls(defaults)
    st.session_state.update(sv_config=config, sv_prompt=prompt, sv_defaults=defaults, sv_sidebar_drawn=True)


def shared_controls() -> tuple[DecodeConfig | None, str, DecodeConfig]:
    """The sidebar's config (None if invalid; the sidebar showed why), prompt and defaults.

    app.py draws the sidebar for every page, so its widgets keep their values whichever page is open.
    A page opened straight from a link on a freshly started server runs without app.py (streamlit's
    pages/ folder mode until the first st.navigation call), so it then draws the sidebar itself.
    The URL is updated here, from the page, so a copied link reopens this state on this page.
    """
    ss = st.session_state
    if not ss.pop("sv_sidebar_drawn", False) and "sv_config" not in ss:
        # Streamlit ran this page without app.py (its pages/ folder mode, used until the first
        # st.navigation call). Leave that mode as st.navigation itself does, so the next run goes
        # through app.py, and draw the sidebar here for this one run.
        PagesManager.uses_pages_directory = False
        st.set_page_config(**PAGE_CONFIG)
        draw_shared_sidebar()
        ss.pop("sv_sidebar_drawn")
    config, prompt, defaults = ss.get("sv_config"), ss.get("sv_prompt", DEFAULT_PROMPT), ss.get("sv_defaults") or app_defaults()
    if config is not None:
        write_url(config, prompt, ss.get("round", 1), defaults)
    return config, prompt, defaults


# ------------------------------------------------------------------------------------------------
# Controls <-> URL


def _pair_label(target: str, draft: str | None) -> str:
    for label, pair in PAIR_PRESETS.items():
        if pair and pair[0] == target and (pair[1] == draft or pair[1] is None):
            return label
    return CUSTOM_PAIR


def init_state_from_url(defaults: DecodeConfig) -> None:
    """On a session's first run, seed every widget from the URL (bad values: message + default)."""
    if st.session_state.get("sv_initialized"):
        return
    state = parse_query(st.query_params.to_dict(), defaults)
    c = state.config
    st.session_state.update(
        sv_initialized=True, url_messages=state.messages, pair=_pair_label(c.target, c.draft),
        custom_target=c.target, custom_draft=c.draft or "", drafter=c.drafter, draft_vocab=c.draft_vocab, rule=c.rule, gamma=c.gamma,
        beta=c.beta, tau=c.tau, temperature=c.temperature, top_k=c.top_k, top_p=c.top_p, seed=c.seed,
        max_new_tokens=c.max_new_tokens, chat_template=c.chat_template,
        skip_layers=",".join(map(str, c.skip_layers)) if c.skip_layers is not None else "",
        exit_threshold=c.exit_threshold, ngram_max=c.ngram_max, tree_mode=c.tree_mode, branching=c.branching,
        tree_depth=c.tree_depth, beam_width=c.beam_width,
        prompt=state.prompt if state.prompt is not None else DEFAULT_PROMPT, round=state.round,
    )


DRAFT_VOCAB_CHOICES = (None, 1024, 2048, 4096, 8192, 16384, 32768, 0)  # None: as shipped; 0: every token


def _vocab_order(k: int | None) -> tuple[int, int]:
    return (0, 0) if k is None else (2, 0) if k == 0 else (1, k)


def _vocab_label(k: int | None) -> str:
    return "as shipped" if k is None else "all tokens" if k == 0 else f"top {k:,} tokens"


def _apply_prompt_preset() -> None:
    st.session_state.prompt = PROMPT_PRESETS[st.session_state.prompt_preset]


def _skip_layers(text: str) -> tuple[int, ...] | None:
    if not text.strip():
        return None
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError as exc:
        raise ConfigError(f"skip layers must be comma-separated layer numbers; got {text!r}") from exc


def sidebar_controls(defaults: DecodeConfig) -> tuple[DecodeConfig | None, str]:
    """Render the sidebar; return the chosen config (None with a message when it is invalid) and prompt."""
    init_state_from_url(defaults)
    ss = st.session_state
    sb = st.sidebar
    sb.header("Models")
    sb.selectbox("Model pair", list(PAIR_PRESETS), key="pair")
    if ss.pair == CUSTOM_PAIR:
        sb.text_input("Target model (hub id or directory)", key="custom_target")
        sb.text_input("Draft model (hub id or directory)", key="custom_draft")
        target, draft = ss.custom_target.strip(), ss.custom_draft.strip() or None
    else:
        target, draft = PAIR_PRESETS[ss.pair]
    sb.radio("Drafter", ["model", "layerskip", "ngram", "tree", "blockwise", "maskquery"], key="drafter", horizontal=True,
             format_func={"model": "draft model", "layerskip": "layer-skip", "ngram": "n-gram", "tree": "tree (RSD)",
                          "blockwise": "blockwise heads", "maskquery": "[MASK] queries"}.get,
             help="draft model: a separate small model · layer-skip: the target minus some layers (Draft & Verify) · "
                  "n-gram: copy from earlier text (prompt lookup) · tree: Recursive Speculative Decoding, a tree of drafts "
                  "(from the draft model when the pair has one, else the layer-skip self-draft) · blockwise heads / "
                  "[MASK] queries: trained parallel drafters on the target's own states (embedded model)")
    layerskip, ngram, tree = ss.drafter == "layerskip", ss.drafter == "ngram", ss.drafter == "tree"
    sb.selectbox("Draft head (FR-Spec vocabulary)", sorted({*DRAFT_VOCAB_CHOICES, ss.draft_vocab}, key=_vocab_order), key="draft_vocab",
                 format_func=_vocab_label, disabled=ss.drafter not in ("model", "tree"),
                 help="the draft model scores only its K most frequent tokens (Zhao et al. 2025): cheaper drafting, q = 0 "
                      "elsewhere, every rule stays exact. 'as shipped' uses the draft's own choice (8,192 for the embedded draft)")
    uses_skip = layerskip or (tree and draft is None)
    sb.radio("Tree", TREE_MODES, key="tree_mode", horizontal=True, disabled=not tree,
             format_func={"constant": "RSD-C: constant branching", "beam": "RSD-S: stochastic beam"}.get)
    sb.slider("Branching factor (RSD-C)", 1, 8, key="branching", disabled=not tree or ss.tree_mode != "constant")
    sb.slider("Tree depth (draft iterations)", 1, GAMMA_MAX, key="tree_depth", disabled=not tree)
    sb.slider("Beam width (RSD-S)", 1, 32, key="beam_width", disabled=not tree or ss.tree_mode != "beam")
    sb.text_input("Layers to skip", key="skip_layers", disabled=not uses_skip, placeholder="default: the two middle layers", help="comma-separated layer numbers, e.g. 10,11,12")
    sb.slider("Adaptive draft exit threshold", 0.0, 1.0, step=0.05, key="exit_threshold", disabled=not layerskip,
              help="stop drafting when the draft's top-1 probability falls below this (0 = off)")
    sb.slider("n-gram length", 1, 8, key="ngram_max", disabled=not ngram)
    sb.header("Verification")
    sb.radio("Rule", ["greedy", "sample", "topbeta"], key="rule", horizontal=True,
             format_func={"greedy": "greedy", "sample": "spec. sampling", "topbeta": "top-β + τ"}.get)
    sb.slider("Block size γ (drafted tokens per round)", 1, GAMMA_MAX, key="gamma", disabled=tree)
    topbeta, sampling = ss.rule == "topbeta", ss.rule == "sample"
    sb.slider("β (target's top tokens a draft may be)", 1, BETA_MAX, key="beta", disabled=not topbeta)
    sb.slider("τ (max log p(top1) − log p(token))", 0.0, 10.0, step=0.1, key="tau", disabled=not topbeta)
    sb.slider("Temperature", 0.0, 2.0, step=0.05, key="temperature", disabled=not sampling)
    sb.slider("Top-k (0 = off)", 0, 200, key="top_k", disabled=not sampling)
    sb.slider("Top-p", 0.05, 1.0, step=0.05, key="top_p", disabled=not sampling)
    sb.number_input("Seed", min_value=0, max_value=2**31 - 1, step=1, key="seed")
    sb.slider("Max new tokens", 1, min(256, MAX_NEW_TOKENS_MAX), key="max_new_tokens")
    sb.header("Prompt")
    sb.selectbox("Preset", list(PROMPT_PRESETS), key="prompt_preset", index=None, placeholder="Pick a preset prompt…",
                 on_change=_apply_prompt_preset)
    sb.text_area("Prompt", key="prompt", height=120)
    sb.checkbox("Apply the chat template", key="chat_template")
    for message in ss.get("url_messages", ()):
        st.warning(message)
    try:
        config = DecodeConfig(
            target=target, draft=draft, drafter=ss.drafter, draft_vocab=ss.draft_vocab, rule=ss.rule, gamma=ss.gamma, beta=ss.beta, tau=float(ss.tau),
            temperature=float(ss.temperature), top_k=ss.top_k, top_p=float(ss.top_p), seed=int(ss.seed),
            max_new_tokens=ss.max_new_tokens, chat_template=ss.chat_template, skip_layers=_skip_layers(ss.skip_layers),
            exit_threshold=float(ss.exit_threshold), ngram_max=ss.ngram_max, tree_mode=ss.tree_mode, branching=ss.branching,
            tree_depth=ss.tree_depth, beam_width=ss.beam_width, device=defaults.device,
        ).validated()
    except ConfigError as exc:
        st.error(str(exc))
        return None, ss.prompt
    return config, ss.prompt


def write_url(config: DecodeConfig, prompt: str, round_index: int, defaults: DecodeConfig) -> None:
    """Mirror the state into the address bar so a copied link reopens this exact view."""
    query = to_query(config, prompt, round_index, defaults)
    if query != st.query_params.to_dict():
        st.query_params.from_dict(query)


# ------------------------------------------------------------------------------------------------
# Reusable views (data in, elements out)


def summary_line(trace: Trace) -> str:
    s = trace.stats
    return (f"**{s.rounds}** rounds · **{s.new_tokens}** tokens · acceptance **{s.acceptance_rate:.0%}** · "
            f"**{s.mean_tokens_per_round:.2f}** tokens per round · **{s.target_forward_passes}** target passes "
            f"vs **{s.autoregressive_forward_passes}** autoregressive · stopped by {s.stop_reason.replace('_', ' ')} · "
            f"{trace.models['device']} {trace.models['dtype']}")


def _go_to(index: int) -> None:
    st.session_state.round = index


def round_navigation(count: int) -> int:
    """First / previous / next / last buttons, a round slider and autoplay; returns the 1-based round."""
    ss = st.session_state
    ss.round = max(1, min(int(ss.get("round", 1)), count))
    cols = st.columns([1, 1, 1, 1, 2, 6])
    cols[0].button("|◀ First", on_click=_go_to, args=(1,), disabled=ss.round == 1, key="nav_first", width="stretch")
    cols[1].button("◀ Prev", on_click=_go_to, args=(ss.round - 1,), disabled=ss.round == 1, key="nav_prev", width="stretch")
    cols[2].button("Next ▶", on_click=_go_to, args=(ss.round + 1,), disabled=ss.round == count, key="nav_next", width="stretch")
    cols[3].button("Last ▶|", on_click=_go_to, args=(count,), disabled=ss.round == count, key="nav_last", width="stretch")
    cols[4].toggle("Autoplay", key="autoplay", disabled=count == 1)
    if count > 1:
        cols[5].slider("Round", 1, count, key="round", label_visibility="collapsed")
    return ss.round


def autoplay_step(count: int, seconds: float = 1.5) -> None:
    """Advance one round per ``seconds`` while autoplay is on; stop at the last round."""
    ss = st.session_state
    if not ss.get("autoplay"):
        return
    now = time.monotonic()
    if now - ss.get("autoplay_at", 0.0) >= seconds * 0.9:
        ss.autoplay_at = now
        if ss.round < count:
            ss.round += 1
        else:
            ss.autoplay = False


def show_tree_round(rnd, key: str) -> None:
    """A tree round as seed 002 draws it: iterations, bars per node, the rejection walk, the tree."""
    from . import figures, render  # figures import plotly; kept local to the views that draw them

    tree = rnd.tree
    st.markdown("##### Draft iterations (one draft forward pass each)")
    st.markdown(render.tree_bands_html(rnd), unsafe_allow_html=True)
    extra = rnd.correction or rnd.bonus
    kind = "correction" if rnd.correction else "bonus"
    st.markdown("##### The whole draft tree (accepted path in green)")
    st.plotly_chart(figures.tree_figure(tree, extra.text if extra else None, kind if extra else None), width="stretch",
                    key=f"{key}_tree")
    st.markdown(f"##### ONE target pass scored all {len(tree.nodes) - 1} drafted nodes and the root")
    expanded = [n for n in tree.nodes if n.draft_top is not None]
    for start in range(0, len(expanded), 4):
        cols = st.columns(4)
        for col, node in zip(cols, expanded[start : start + 4]):
            children = {tree.nodes[c].token_id: render.COLORS["draft"][0] for c in range(len(tree.nodes)) if tree.nodes[c].parent == node.index}
            col.plotly_chart(figures.distribution_bars(node.draft_top, children, f"draft q after '{render.display_text(node.text)}'",
                                                       "#d1c4e9"), width="stretch", key=f"{key}_q_{node.index}")
            col.plotly_chart(figures.distribution_bars(node.target_top, children, f"target p after '{render.display_text(node.text)}'",
                                                       "#b0bec5"), width="stretch", key=f"{key}_p_{node.index}")
    st.markdown("##### Recursive rejection sampling")
    st.markdown(render.rrs_flow_html(rnd), unsafe_allow_html=True)
    residuals = [(pos, top) for pos, top in zip(rnd.draft, tree.residual_tops) if top is not None]
    if residuals:
        cols = st.columns(min(4, len(residuals)))
        for i, (pos, top) in enumerate(residuals):
            cols[i % len(cols)].plotly_chart(
                figures.distribution_bars(top, {}, f"residual after rejecting '{render.display_text(pos.text)}'",
                                          render.COLORS["correction"][0]), width="stretch", key=f"{key}_res_{i}")
    st.markdown(render.output_chain_html(rnd), unsafe_allow_html=True)
