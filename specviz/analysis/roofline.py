"""Why speculation pays (or not) on this machine: the measured pass costs against the block size, beside the roofline.

A decoding pass over n tokens reads every weight once and does 2 N n FLOPs (N parameters). Its time is at least
the larger of the memory bound, weight bytes / bandwidth, flat in n, and the compute bound, 2 N n / FLOP rate,
growing with n (the roofline model, Williams et al. 2009). While the memory bound is the larger, a pass over
k + 1 tokens costs about one token's step: v(k) ~ 1, verification is nearly free (Leviathan et al. 2023, Sec. 3.4
and 4), and the best block size is large. The measured curve shows where this machine's kernels leave that.

Pure data in, plain data out; no streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from specviz.config import DecodeConfig
from specviz.drafters.modules import draft_source
from specviz.engine import ModelPair
from specviz.models.kernels import INT4, INT8, ONEDNN, QUANTISED
from specviz.models.machine import matrix_units_in_words
from specviz.models.profile import FLAT, PassProfile, model_profile, pass_profile
from specviz.models.rates import MachineRates
from specviz.registry.drafters import drafter_entry
from specviz.rules.theory import expected_speedup

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
    """The drafter's own forward (its model, its lean body, its trimmed head) measured as the target's is, or None
    for a drafter without an autoregressive draft (n-gram lookup, drafters on the target's states)."""
    source = draft_source(config, pair)
    if source is None:
        return None
    loaded, forward = source
    entry = drafter_entry(config.drafter)
    own = config.settings(entry.settings) if entry.settings else None  # what else shapes its forward
    name = f"{config.drafter}:{config.draft_vocab}:{own}"
    return pass_profile(loaded, forward, forward_name=name)


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
        "wider pass, is the slow case; the theory priced with v(k) takes that as measured."
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
    coefficient of Leviathan et al. 2023, Sec. 3.1; with v(k), what Thm. 3.8 prices a block at here)."""
    return draft.step_ms / target.step_ms


def best_priced_gamma(alpha: float, c: float, profile: PassProfile) -> int:
    """The block size, among those the profile measured (1..8), with the highest speedup of Thm. 3.8 priced at this
    machine's v(k) (:func:`~specviz.rules.theory.expected_speedup`)."""
    return max(profile.verify_costs, key=lambda k: expected_speedup(alpha, k, c, profile.verify_cost(k)))


def speculation_summary(alpha: float, c: float, profile: PassProfile) -> str:
    """What the roofline means for speculation here at a measured alpha and c: the block size the theory picks at
    that one alpha, said to be that (the Gamma sweep's picks come from each block size's own runs)."""
    gamma = best_priced_gamma(alpha, c, profile)
    return (
        f"The theory at this trace's α = {alpha:.2f} and c = {c:.3f}, priced at this machine's v(k), is best at "
        f"γ = {gamma} ({expected_speedup(alpha, gamma, c, profile.verify_cost(gamma)):.2f}× over the target alone, "
        f"full blocks); v(k) stays flat (≤ {FLAT}) up to k = {profile.flat_until()}. A prediction at one α for every "
        "γ: the Gamma sweep decodes each γ, whose own α and clipped last rounds may pick another γ."
    )


def pair_profiles(config: DecodeConfig, pair: ModelPair) -> tuple[PassProfile, PassProfile | None]:
    """The target's profile on its kernel path and the drafter's (None where it has no forward of its own)."""
    return model_profile(pair.target), draft_profile(config, pair)


PAYS = 1.2  # a priced speedup from which speculation visibly pays in a class


@dataclass(frozen=True)
class MeasuredDefaults:
    """A pair's default precision, block size and draft precision on this machine, and why, from its profiles;
    ``fastest``: for each target precision, the draft precision and γ whose priced speedup is highest there
    (``--fastest``), with that speedup and the tokens a second it prices (the speedup over the target's own step)."""

    dtype: str
    gamma: int
    reason: str
    draft_dtype: str | None = None  # None: the target's
    fastest: dict[str, tuple[str, int, float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:  # a stored file gives lists: read back as the tuples they were
        fastest = {k: (str(d), int(g), float(x), float(t)) for k, (d, g, x, t) in self.fastest.items()}
        object.__setattr__(self, "fastest", fastest)


def priced_draft(alpha: float, target: PassProfile, draft: PassProfile) -> tuple[int, float]:
    """(best γ, the speedup priced there) of a draft at acceptance ``alpha``: Thm. 3.8 at c = the draft's step over
    the target's and this machine's v(k)."""
    c = cost_coefficient(target, draft)
    gamma = best_priced_gamma(alpha, c, target)
    return gamma, expected_speedup(alpha, gamma, c, target.verify_cost(gamma))


def fastest_drafts(
    profiles: dict[tuple[str, str], tuple[PassProfile, PassProfile]], alphas: dict[str, float]
) -> dict[str, tuple[str, int, float, float]]:
    """For each target precision, the draft precision (its γ, its priced speedup, the tokens a second that prices:
    the speedup over the target's one-token step) that is fastest at its measured acceptance. ``profiles``: (target
    precision, draft precision) -> (target, draft); ``alphas``: by draft precision. The output is the target's
    whatever the draft runs in, so every choice is as exact as the target's precision."""
    fastest: dict[str, tuple[str, int, float, float]] = {}
    for (dtype, draft_dtype), (target, draft) in profiles.items():
        gamma, speedup = priced_draft(alphas[draft_dtype], target, draft)
        if dtype not in fastest or speedup > fastest[dtype][2]:
            fastest[dtype] = (draft_dtype, gamma, speedup, speedup * 1000 / target.step_ms)
    return fastest


def measured_defaults(profiles: dict[str, tuple[PassProfile, PassProfile]], alpha: float) -> MeasuredDefaults:
    """Pick the precision that keeps the lesson true: float32 (exact) where its speculation, priced at this machine's
    v(k) and c at the draft's acceptance ``alpha``, pays at least ``PAYS``; otherwise the precision whose priced
    speedup is highest (bfloat16, lossless only up to rounding). ``profiles``: precision -> (target, draft)."""
    priced = {}
    for dtype, (target, draft) in profiles.items():
        gamma, speedup = priced_draft(alpha, target, draft)
        priced[dtype] = (speedup, gamma)
    exact = priced.get("float32")
    dtype = "float32" if exact and exact[0] >= PAYS else max(priced, key=lambda d: priced[d][0])
    words = ", ".join(f"{d} {speedup:.2f}× at γ = {g}" for d, (speedup, g) in priced.items())
    why = (
        "float32 pays, so the exact precision is the default"
        if dtype == "float32"
        else f"float32 does not reach {PAYS}×, so {dtype} is the default (lossless only up to rounding)"
    )
    return MeasuredDefaults(
        dtype,
        priced[dtype][1],
        f"At the draft's greedy acceptance on held-out prompts, "
        f"α = {alpha:.2f}, the theory priced at this machine's measured v(k) and c gives {words}: "
        f"{why}.",
    )


def priced_story(priced: float, alpha: float, gamma: int, c: float, target: PassProfile) -> str:
    """The theory's speedup for a run, priced with this machine's profile, named for what it is: a prediction beside
    the configuration's one speed figure (the race's measurement, quoted by every speed page), never in its place."""
    return (
        f"**The theory at this α and c**, priced with this machine's profile: {priced:.2f}× over the target alone "
        f"(α = {alpha:.2f}, γ = {gamma}, c = {c:.3f}; {target.model} in {kernel_words(target)}, {target.cpu}, "
        "profiled once when the models were "
        "loaded). A prediction, not a measurement: the configuration's speedup is the race's, in the headline above "
        "(before a race, this priced figure, labelled so). Live timings are checked against it."
    )
