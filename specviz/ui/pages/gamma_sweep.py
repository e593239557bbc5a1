"""Gamma sweep: measured tokens per round and speedup against the theoretical curves."""

import streamlit as st

from specviz import limits, ui
from specviz.analysis import sweep
from specviz.analysis.roofline import below_one_sentence
from specviz.models.profile import held_profile
from specviz.presentation import sweep_figures
from specviz.registry.drafters import drafter_entry
from specviz.registry.rules import rule_entry
from specviz.serving.works import Work
from specviz.ui.state import page_key

config, prompt, defaults = ui.shared_controls()
st.title("Gamma sweep: which block size pays?")
ui.hold_students_quiz(config, prompt, defaults)  # a student's quiz comes first
if config is not None:
    ui.precision_caption(config)
st.markdown(
    "The target alone and each block size γ run once per cycle, the order reversed every other cycle; each γ's "
    "speedup pairs it with the target alone of the same cycle (medians over the cycles, so both sides of a speedup "
    f"meet the same load on this machine; up to {limits.SWEEP_PAIRS} cycles, as many as fit in "
    f"{limits.BUTTON_BUDGET_S:.0f} s by this machine's profile, at least one; at most "
    f"{limits.SWEEP_GAMMAS_MAX} values of γ and {limits.SWEEP_TOKENS_MAX} new tokens per run). The theory "
    "curves use each run's measured α, each round's realised block size k (the last rounds are clipped by the "
    "token budget) and the draft/target cost ratio **c** measured on this device: "
    "E[tokens/round] = (1 − α^(k+1)) / (1 − α) and speedup = Σ (1 − α^(k+1)) / (1 − α) over Σ (kc + 1). "
    "That speedup predicts the target's one pass over k + 1 tokens as one step (true on hardware with "
    "parallelism to spare); the dotted curve predicts it at its cost v(k) measured here: "
    "Σ (1 − α^(k+1)) / (1 − α) over Σ (kc + v(k))."
)
gammas = st.multiselect(
    "Block sizes γ", list(range(1, 17)), default=[1, 2, 3, 4, 6, 8], max_selections=limits.SWEEP_GAMMAS_MAX
)
swept_pair = ui.page_pair(config) if config is not None else None
if config is not None and swept_pair is not None:  # the configuration's figure and this machine's fastest, always
    ui.show_headline(config, prompt)
    if (fastest := ui.fastest_note(config, prompt)) is not None:
        st.caption(fastest)
if config is not None and gammas and swept_pair is not None:
    cycles = sweep.sweep_cycles(config, len(gammas), held_profile(swept_pair.target).step_ms)
    result, noisy = ui.measured_again(
        Work("sweep", config, prompt, (tuple(sorted(gammas)),)),
        lambda swept: bool(sweep.loaded_gammas(swept[0])),
        start="Run the sweep",
    )
    if result is None and ui.may_start():
        st.info(
            f"Press the button to run the sweep ({cycles} cycle{'s' if cycles > 1 else ''} of the target alone and "
            "each γ, predicted from this machine's profile)."
        )
    elif noisy is not None:
        st.warning("The latest sweep was noisy by other work on the server: the quiet one before it is shown.")
    if result is not None:
        table, c = result
        loaded = sweep.loaded_gammas(table)
        best_measured = sweep.fastest_quiet_gamma(table)
        tied = sweep.gammas_tied_with(table, best_measured) if best_measured is not None else []
        alpha = float(table.alpha.mean())
        cols = st.columns(4)
        cols[0].metric(
            "cost ratio c", f"{c:.3f}", help="the draft's step over the target's, from this machine's profile"
        )
        cols[1].metric(
            f"mean α ({config.rule})", f"{alpha:.3f}", help=f"over the runs: {rule_entry(config.rule).alpha}"
        )
        cols[2].metric(
            "fastest γ in this sweep",
            "none quiet"
            if best_measured is None
            else f"{best_measured} (tied: {', '.join(map(str, tied))})"
            if tied
            else best_measured,
            help="the highest timed ratio (the target alone's median time over the speculative median time) among "
            "the γ whose timing measured speculation, not the server's load: the peak of the chart's timed line",
        )
        cols[3].metric(
            "theory's peak, v(k) here",
            f"γ = {sweep.best_gamma_by(table, 'expected_speedup_verify_measured')}",
            help="where the dotted curve peaks over the swept γ: the target's pass over k + 1 tokens at its measured "
            "cost (the machine profile), each γ at the α its own run measured; a prediction, not a timing",
        )
        for gamma, signs in sweep.load_signs_by_gamma(table).items():
            st.warning(f"The timing of γ = {gamma} measured this server's load, not speculation: {'; '.join(signs)}.")
        if loaded:
            st.caption(
                "Those timings are no result (grey crosses on the chart, off its timed line); read the dotted curve, "
                "this machine's figure from its quiet profile." + ui.measure_again_hint()
            )
        st.plotly_chart(sweep_figures.gamma_sweep_figure(table, best_measured, loaded), width="stretch")
        if tied:
            st.caption(
                f"A tie on this machine: the fastest pair of γ = {', '.join(map(str, tied))} reaches the "
                f"slowest pair of γ = {best_measured} (the bars run from each γ's slowest to its fastest pair), "
                "so this sweep cannot rank them."
            )
        st.markdown(
            "Larger γ buys more tokens per target pass but pays γ draft passes each round, and the chance that "
            "a long guess survives decays like α^γ. The optimum balances the two; with c near 1 (a draft as "
            "slow as the target) the best γ is the smallest, and no γ beats autoregressive decoding."
        )
        st.dataframe(sweep.readable(table), width="stretch", hide_index=True)
        below_one = below_one_sentence(held_profile(swept_pair.target).verify_costs).strip()
        if below_one:
            st.caption(f"The v(k) column predicts each run's rounds from this machine's profile. {below_one}")
        st.download_button(
            "Download sweep (CSV)", table.to_csv(index=False), "specviz-gamma-sweep.csv", "text/csv", on_click="ignore"
        )

st.subheader("Draft vocabulary: what the head size K does (FR-Spec)")
st.markdown(
    "On a CPU most of a small draft's time is its output head over the whole vocabulary. FR-Spec "
    "(Zhao et al. 2025) lets the draft score only its K most frequent tokens: q is zero elsewhere, so every "
    "rule stays exact, and a token outside the K can only be rejected. "
    "Smaller K: cheaper drafts (lower c), slightly lower α."
)
trimmable = config is not None and drafter_entry(config.drafter).draft_model == "always"
vocab_pair = ui.page_pair(config) if config is not None and trimmable else None
if config is not None and vocab_pair is not None and vocab_pair.draft and vocab_pair.draft.vocab_ranking is not None:
    vocab_table = ui.shared_result(
        Work("vocab-sweep", config, prompt), button="Compare head sizes", button_key=page_key("sweep", "head_sizes")
    )
    if vocab_table is not None:
        st.plotly_chart(sweep_figures.vocab_sweep_figure(vocab_table), width="stretch")
        st.dataframe(sweep.readable(vocab_table), width="stretch", hide_index=True)
elif trimmable:
    st.info("This draft ships no token frequency ranking, so its head cannot be trimmed.")
else:
    st.info("Pick the draft-model drafter to compare draft head sizes.")
