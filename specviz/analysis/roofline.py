"""Why speculation pays (or not) on this machine: the measured pass costs against the block size, beside the roofline.

A decoding pass over n tokens reads every weight once and does 2 N n FLOPs (N parameters). Its time is at least
the larger of the memory bound, weight bytes / bandwidth, flat in n, and the compute bound, 2 N n / FLOP rate,
growing with n (the roofline model, Williams et al. 2009). While the memory bound is the larger, a pass over
k + 1 tokens costs about one token's step: v(k) ~ 1, verification is nearly free (Leviathan et al. 2023, Sec. 3.4
and 4), and the best block size is large. The measured curve shows where this machine's kernels leave that.

Pure data in, plain data out; no streamlit.
"""

from __future__ import annotations

import pandas as pd

from specviz.config import DecodeConfig
from specviz.drafters.modules import draft_source, states_module
from specviz.engine import ModelPair
from specviz.models.profile import FLAT, PassProfile, known_profile, load_words, model_profile, pass_profile
from specviz.models.rates import MachineRates
from specviz.rules.theory import expected_speedup
from specviz.runtime.cpu.kernel_paths import INT4, INT8, ONEDNN, QUANTISED
from specviz.runtime.machine import matrix_units_in_words
from specviz.runtime.reference import full_forward

EXITS = (0.0, 0.6, 0.7, 0.8, 0.9)  # the confidence exits predicted beside every γ (0: always γ tokens)

KERNEL_WORDS = {
    ONEDNN: "oneDNN's kernels on packed weights",
    "default": "torch's default kernels",
    INT8: "int8 products summed in int32",
    INT4: "the package's int4 kernel (int8 activations, int32 sums)",
}


def kernel_words(profile: PassProfile) -> str:
    """The precision and kernels a profile was measured on, in words (a quantised model's own precision, not its
    float32 norms')."""
    precision = profile.kernels if profile.kernels in QUANTISED else profile.dtype
    return f"{precision} on {KERNEL_WORDS.get(profile.kernels, profile.kernels)}"


def draft_profile(config: DecodeConfig, pair: ModelPair) -> PassProfile | None:
    """The drafter's own forward (its model, its direct Llama body, its trimmed head) measured as the target's is, or
    None
    for a drafter without an autoregressive draft (n-gram lookup, drafters on the target's states). The profile is
    the forward's (:func:`~specviz.models.profile.forward_name`), whatever else the drafter's settings hold: the
    one every page and ``python -m specviz machine`` read (the oracle's is the target's own)."""
    source = draft_source(config, pair)
    return None if source is None else pass_profile(*source)


def profiles_at_hand(config: DecodeConfig, pair: ModelPair) -> tuple[PassProfile, PassProfile | None] | None:
    """The target's and the drafter's profiles (:func:`pair_profiles`) where both are at hand without measuring
    anything (:func:`~specviz.models.profile.known_profile`), None where one would be measured now, or the drafter's
    cost is timed live (a drafter on the target's states): a page that opens predicts only from what was measured."""
    target = known_profile(pair.target, full_forward)
    source = draft_source(config, pair)
    draft = known_profile(*source) if source is not None else None
    if target is None or (draft is None and (source is not None or states_module(config.drafter) is not None)):
        return None
    return target, draft


def speed_sentence(profile: PassProfile) -> str:
    """What this machine makes of a pass over k + 1 tokens, in words, from its measured profile."""
    costs = profile.verify_costs
    flat = profile.flat_until()
    shape = (
        f"flat (at most {FLAT} steps) up to k = {flat}"
        if flat == max(costs)
        else f"flat up to k = {flat}, then growing"
        if flat
        else "growing with k: a large block loses here"
    )
    return (
        f"Measured on this machine ({profile.cpu}; {matrix_units_in_words()}): the target's one-token step takes "
        f"{profile.step_ms:.1f} ms in {kernel_words(profile)} "
        f"({profile.bandwidth_gbs:.1f} GB/s of weights), and its pass over k + 1 tokens costs v(k) = "
        f"{', '.join(f'{v:.2f}' for v in costs.values())} one-token steps for k = 1..{max(costs)}: {shape}."
        + below_one_sentence(costs)
        + busy_sentence(profile)
    )


def busy_sentence(profile: PassProfile) -> str:
    """What a profile measured on a busy machine is (empty for a quiet one, the machine's): not this machine's cost,
    with what the load was (:func:`~specviz.models.profile.load_words`); it is kept by no one and measured again until
    a quiet measurement is (:func:`~specviz.models.profile.pass_profile`)."""
    if profile.quiet:
        return ""
    return (
        f" Measured busy ({load_words(profile)}): not this machine's quiet cost, so no figure here is predicted "
        "from it; measured again until a quiet measurement is kept."
    )


def below_one_sentence(costs: dict[int, float]) -> str:
    """What a v(k) below 1 means, in words (empty where none is): a pass over k + 1 tokens measured cheaper than
    the one-token step, which the roofline says cannot be (the same weights read, more arithmetic) unless the
    kernel for a single row is slower than the one for several, as it is on some CPUs' matrix libraries."""
    cheaper = [k for k, v in costs.items() if v < 1]
    if not cheaper:
        return ""
    return (
        f" v(k) below 1 (k = {', '.join(map(str, cheaper))}): a pass over k + 1 tokens measured cheaper than over one "
        "token. On this machine the one-row kernel is slower than the batched one, so the one-token step, not the "
        "wider pass, is the slow case; the theory predicted with v(k) takes that as measured."
    )


def roofline_table(target: PassProfile, draft: PassProfile | None, rates: MachineRates) -> pd.DataFrame:
    """Per pass size n = k + 1 = 1..9: the target's (and draft's) measured ms beside the target's memory and
    compute bounds, and v(k) = T(k + 1) / T(1)."""
    element = 2 if target.dtype in ("bfloat16", "float16") else 4
    parameters = target.weight_bytes // element
    rows = []
    for n, ms in enumerate(target.pass_ms, start=1):
        memory = rates.memory_bound_ms(target.weight_bytes)
        compute = rates.compute_bound_ms(parameters, n, target.dtype) if target.dtype in rates.gflops else 0.0
        rows.append(
            dict(
                tokens=n,
                k=n - 1,
                target_ms=ms,
                memory_bound_ms=memory,
                compute_bound_ms=compute,
                roofline_ms=max(memory, compute),
                verify_cost=ms / target.step_ms,
                draft_ms=draft.pass_ms[n - 1] if draft else None,
            )
        )
    return pd.DataFrame(rows)


def cost_coefficient(target: PassProfile, draft: PassProfile) -> float:
    """c = T_draft(1) / T_target(1): the draft's one-token step over the target's, from their quiet profiles (the cost
    coefficient of Leviathan et al. 2023, Sec. 3.1; with v(k), what Thm. 3.8 predicts a block at here)."""
    return draft.step_ms / target.step_ms


def best_predicted_gamma(alpha: float, c: float, profile: PassProfile) -> int:
    """The block size, among those the profile measured (1..8), with the highest speedup of Thm. 3.8 predicted at this
    machine's v(k) (:func:`~specviz.rules.theory.expected_speedup`)."""
    return max(profile.verify_costs, key=lambda k: expected_speedup(alpha, k, c, profile.verify_cost(k)))


def flat_words(profile: PassProfile) -> str:
    """How far v(k) stays flat on this machine, in words."""
    flat = profile.flat_until()
    if flat == 0:
        return f"v(k) is above {FLAT} already at k = 1: verifying even one drafted token costs more than a step here"
    return f"v(k) stays flat (≤ {FLAT}) up to k = {flat}"


def speculation_summary(alpha: float, gamma: int, c: float, profile: PassProfile) -> str:
    """What the roofline means for speculation here at a measured alpha and c, at the sidebar's block ``gamma``: the
    theory predicted at this machine's v(k), worded as a prediction. No best γ is named here: this machine's fastest
    is the one every speed page names (:func:`specviz.analysis.claims.fastest_text`)."""
    predicted = expected_speedup(alpha, gamma, c, profile.verify_cost(gamma))
    return (
        f"At this trace's α = {alpha:.2f} and c = {c:.3f}, the theory at this machine's v(k) predicts "
        f"{predicted:.2f}× over the target alone at γ = {gamma} (full blocks); {flat_words(profile)}."
    )


def pair_profiles(config: DecodeConfig, pair: ModelPair) -> tuple[PassProfile, PassProfile | None]:
    """The target's profile on its kernel path and the drafter's (None where it has no forward of its own)."""
    return model_profile(pair.target), draft_profile(config, pair)


def prediction_story(predicted: float, alpha: float, gamma: int, c: float, target: PassProfile) -> str:
    """The theory's speedup for a run, predicted with this machine's profile, named for what it is: a prediction beside
    the configuration's one speed figure (the race's measurement, quoted by every speed page), never in its place."""
    return (
        f"**The theory at this α and c**, predicted with this machine's profile: {predicted:.2f}× over the target "
        f"alone (α = {alpha:.2f}, γ = {gamma}, c = {c:.3f}; {target.model} in {kernel_words(target)}, {target.cpu}, "
        "profiled once when the models were "
        "loaded). A prediction, not a measurement: the configuration's speedup is the race's, in the headline above "
        "(before a race, this predicted figure, labelled so). Live timings are checked against it."
    )
