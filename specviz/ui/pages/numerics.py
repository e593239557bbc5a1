"""Precision and rounding: the same prompt decoded greedily by the target alone and speculatively, in float32 and in
bfloat16; where a bfloat16 run departs, what each computation made of the two tokens;
the match rate over the presets."""

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from specviz import ui
from specviz.analysis import numerics
from specviz.analysis.defaults import PRECISIONS
from specviz.analysis.draft_precision import precisions_on
from specviz.config import DecodeConfig
from specviz.engine import uses_draft_model
from specviz.limits import BUTTON_BUDGET_S
from specviz.serving.works import Work

config, prompt, defaults = ui.shared_controls()
st.title("Precision and rounding: exact, or exact up to rounding?")
ui.hold_students_quiz(config, prompt, defaults)  # a student's quiz comes first
st.markdown(
    "Greedy speculative decoding emits the target's argmax at every position, so in exact arithmetic its text **is** "
    "the target's own greedy text. Computers round. In a round the target scores the drafted tokens in ONE pass over "
    "k + 1 tokens; its own `generate` scores each position in a one-token step. Same weights, but matrix products of "
    "different shapes, whose kernels add in a different order, so they round differently: about 1e-5 of a logit in "
    "float32, tenths of a logit in bfloat16 (8 bits of mantissa). Where the target's two best tokens are nearly tied, "
    "the two computations can pick different tokens, and from there the texts part. No rule is at fault: speculative "
    "decoding in half precision is **lossless only up to floating-point rounding**, as serving engines say (vLLM: "
    '"lossless up to floating point"). The same holds for speculative sampling, whose law is kept up to the same '
    "rounding: set the sidebar's precision to bfloat16 and run the Losslessness lab."
)
if config is not None:
    ui.precision_caption(config)
st.caption(
    "float32 is the precision in which the round view's lesson, the same output, holds exactly. "
    + ui.pair_defaults_text(config or defaults)
    + " A precision set in the sidebar, a link or the CLI wins. "
    "The speed pages (Metrics, Gamma sweep, Parallel verification) measure c, v(k) and the speedup in the "
    "sidebar's precision; the Parallel verification page draws this machine's roofline in each precision."
)


def show_preference(column: DeltaGenerator, title: str, said: numerics.Preference) -> None:
    gap = "not among the recorded top tokens" if said.gap is None else f"**{said.gap:+.4f}**"
    column.markdown(
        f"**{title}** chose {said.texts[0]!r} ({said.ids[0]}) over {said.texts[1]!r} ({said.ids[1]}): "
        f"logit difference {gap}"
    )


def show_four_outputs(config: DecodeConfig) -> None:
    precisions = precisions_on(config.device, PRECISIONS)
    runs = ui.shared_result(
        Work("numerics", config, prompt, (precisions,)),
        button=f"Decode in {', '.join(precisions)}",
        hint="Press the button: the sidebar's pair decodes the prompt greedily in each precision, by the target "
        "alone and speculatively (each speculative run against the target in ITS precision: int8 and int4 are "
        "exact to the int8 and int4 targets, coarser models than the float32 one). Each precision of the pair is "
        "loaded once per server and kept.",
    )
    if not runs:
        return
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "precision": r.dtype,
                    "identical tokens": f"{r.matching} / {len(r.generate_ids)}",
                    "departs at token": r.departure.position + 1 if r.departure else None,
                }
                for r in runs
            ]
        ),
        hide_index=True,
    )
    for run in runs:
        left, right = st.columns(2)
        left.markdown(f"**{run.dtype}, target alone (`generate`)**")
        left.text(run.generate_text)
        right.markdown(f"**{run.dtype}, speculative (greedy)**")
        right.text(run.speculative_text)
    for run in runs:
        d = run.departure
        if d is None:
            st.success(
                f"**{run.dtype}**: the speculative output is token-identical to the target's own generate "
                f"({len(run.generate_ids)} tokens)."
            )
            continue
        st.warning(
            f"**{run.dtype}**: the texts part at new token {d.position + 1}, computed by round "
            f"{d.round_index + 1}'s verification pass over {d.pass_tokens} tokens."
        )
        left, right = st.columns(2)
        show_preference(left, "The one-token step (generate)", d.step)
        show_preference(right, f"The pass over {d.pass_tokens} tokens (speculative)", d.verification)
        st.caption(
            "A difference this small is a near-tie: the rounding of one computation is larger than it, so the "
            "two computations disagree about which token is best (0: an exact tie in that precision, broken by "
            "the lower token id). Each is a correct rounding of the same model."
        )


def show_preset_match_rate(config: DecodeConfig) -> None:
    st.subheader("How often does bfloat16 keep the text? The preset prompts")
    presets = list(ui.PROMPT_PRESETS.items())
    runs = ui.shared_result(
        Work("numerics-presets", config, "", (tuple(presets),)),
        button="Measure the match rate over the presets (bfloat16)",
        hint=f"Press the button: the {len(presets)} preset prompts (as many as this machine decodes in about "
        f"{BUTTON_BUDGET_S:.0f} s) are decoded greedily in bfloat16 by the target alone and speculatively, "
        "with the sidebar's pair, γ and max new tokens.",
    )
    if not runs:
        return
    rate = numerics.match_rate(runs)
    left, right = st.columns(2)
    left.metric(
        "outputs identical to the target's own bfloat16 generate",
        f"{rate['identical']} of {rate['prompts']}",
        help=f"{len(runs)} of the {len(presets)} presets decoded: as many as fit about {BUTTON_BUDGET_S:.0f} s here",
    )
    right.metric(
        "new tokens before the first departure",
        f"{rate['matching_tokens']} of {rate['tokens']} ({rate['matching_share']:.0%})",
    )
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "prompt": name,
                    "identical": r.departure is None,
                    "first departure at token": r.departure.position + 1 if r.departure else None,
                }
                for (name, _), r in zip(presets, runs)
            ]
        ),
        width="stretch",
        hide_index=True,
    )


def show_draft_precisions(config: DecodeConfig) -> None:
    st.subheader("Why the draft may be cheap: the target decides")
    st.markdown(
        f"The draft only proposes; the target decides every token. So the draft's precision changes how often its "
        f"tokens are accepted (α) and what a drafted token costs (c, in target steps), **never the output**: with the "
        f"target in **{config.dtype}** the speculative text is the target's own greedy text whatever the draft runs "
        "in, and speculative sampling stays exact for any q (the rule tests the q the token was drawn from). What "
        "'exact' means is decided by the target's precision alone. int8: the draft's matrices in 8 bits, its "
        "activations quantised on the fly (CPU); int4: its matrices in 4 bits, groups of 32 with their own scale "
        "(CPU, the package's C kernel; a pair fetched as GGUF runs the file's own Q4_K blocks where it has them)."
    )
    if not uses_draft_model(config):
        st.info("The sidebar's drafter has no draft model of its own: pick the draft model (or a tree) to compare.")
        return
    precisions = precisions_on(config.device)
    rows = ui.shared_result(
        Work("draft-precisions", config.replace(draft_dtype=None), prompt, (precisions,)),
        button=f"Decode with the draft in {', '.join(precisions)}",
        hint="Press the button: the prompt is decoded greedily by the target alone once, then speculatively with "
        "the sidebar's draft in each precision (each loaded once per server and kept).",
    )
    if not rows:
        return
    ui.show_headline(config, prompt)
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "draft precision": r.draft_dtype,
                    "c (draft step / target step)": round(r.cost_ratio, 3),
                    "α on this prompt": round(r.alpha, 2),
                    "tokens per round": round(r.tokens_per_round, 2),
                    f"predicted speedup at γ {config.gamma}": f"{r.predicted_speedup:.2f}×",
                    f"identical to the target's {config.dtype} greedy": f"{r.matching} / {r.total}",
                }
                for r in rows
            ]
        ),
        hide_index=True,
    )
    if all(r.identical for r in rows):
        st.success(f"Every draft precision gave the target's own {config.dtype} greedy text, token for token.")
    else:
        st.warning(
            f"A run parted from the target's own {config.dtype} greedy text: in half precision the target's pass "
            "over k + 1 tokens rounds unlike its one-token steps (above), whatever the draft runs in."
        )


if config is not None:
    show_four_outputs(config)
    show_draft_precisions(config)
    show_preset_match_rate(config)
