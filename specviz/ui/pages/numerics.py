"""Precision and rounding: the same prompt decoded greedily by the target alone and speculatively, in float32 and in
bfloat16; where a bfloat16 run departs, what each computation made of the two tokens;
the match rate over the presets."""

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from specviz import ui
from specviz.analysis import numerics
from specviz.analysis.defaults import PRECISIONS
from specviz.config import DecodeConfig
from specviz.engine import prompt_ids_for
from specviz.serving.jobs import ProgressFn
from specviz.serving.models import pair_for, trace_key

config, prompt, defaults = ui.shared_controls()
st.title("Precision and rounding: exact, or exact up to rounding?")
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
    key = trace_key(config, prompt, "numerics", PRECISIONS)

    def compute(on_progress: ProgressFn) -> list[numerics.PrecisionRun]:
        runs = []
        for done, dtype in enumerate(PRECISIONS):
            on_progress(done, len(PRECISIONS), f"Decoding in {dtype}")
            pair = pair_for(config.replace(dtype=dtype))
            runs.append(
                numerics.precision_run(config.replace(dtype=dtype), pair, prompt_ids_for(pair, config, prompt, None))
            )
        return runs

    runs = ui.shared_result(
        key,
        compute,
        "Comparing precisions",
        button="Decode in float32 and in bfloat16",
        hint="Press the button: the sidebar's pair decodes the prompt greedily four times (target "
        "alone and speculative, in each precision). Both precisions of the pair are loaded once "
        "per server and kept.",
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
    key = trace_key(config, "", "numerics-presets")

    def compute(on_progress: ProgressFn) -> list[numerics.PrecisionRun]:
        bf16 = config.replace(dtype="bfloat16")
        pair = pair_for(bf16)
        runs = []
        for done, (name, text) in enumerate(presets):
            on_progress(done, len(presets), f"{name} ({done + 1} of {len(presets)})")
            runs.append(numerics.precision_run(bf16, pair, prompt_ids_for(pair, bf16, text, None)))
        return runs

    runs = ui.shared_result(
        key,
        compute,
        "Decoding the presets in bfloat16",
        button="Measure the match rate over the presets (bfloat16)",
        hint=f"Press the button: each of the {len(presets)} preset prompts is decoded greedily in "
        "bfloat16 by the target alone and speculatively, "
        "with the sidebar's pair, γ and max new tokens.",
    )
    if not runs:
        return
    rate = numerics.match_rate(runs)
    left, right = st.columns(2)
    left.metric("outputs identical to the target's own bfloat16 generate", f"{rate['identical']} of {rate['prompts']}")
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


if config is not None:
    show_four_outputs(config)
    show_preset_match_rate(config)
