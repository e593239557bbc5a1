"""What a page may say about a configuration's speed: the race the class watched is the truth.

Three kinds of figure speak of speed here. The race runs the target alone and speculative decoding on one clock and
measures their wall times (:mod:`specviz.analysis.race`): what the class watched, and what the pages quote. A
prediction comes from this machine's profile (Leviathan et al. 2023, Thm. 3.8 at the measured c and v(k), or greedy
rounds replayed at its costs: :mod:`specviz.analysis.replay`): worded "predicted", never "N× faster", and made only
from a profile measured on a quiet machine. A page's own live check (a timed ratio, a sweep) is named for what it is.

The rules every speed page follows, in one place:

- a raced configuration's speedup is the race's figure, and a prediction beside it that differs by more than
  :data:`DISAGREE` is said to, the race trusted;
- "no draft pays" is said only where a race of the settings shows speculation slower than the target alone, or where
  a quiet replay predicts it and no race contradicts it; a replay's figures are stated only where the replay was quiet.

Pure: no streamlit, no models.
"""

from __future__ import annotations

from specviz.analysis.replay import FastestDraft

DISAGREE = 0.25  # a prediction this far from the race (relative to the race) contradicts it: the race is trusted


def speedup_words(speedup: float) -> str:
    """A measured speedup (the target alone's time over speculative decoding's) as every page words it: "1.36×
    faster", and under 1, where speculation lost, "0.97× (slower)", never "faster"."""
    return f"{speedup:.2f}× faster" if speedup >= 1 else f"{speedup:.2f}× (slower)"


def predicted_words(predicted: float) -> str:
    """A predicted speedup in words: "predicted 2.05×", never "faster" (nothing was timed)."""
    return f"predicted {predicted:.2f}×"


def disagrees(raced: float, predicted: float) -> bool:
    """Whether a ``predicted`` speedup contradicts the ``raced`` one: more than :data:`DISAGREE` of the race apart."""
    return abs(predicted - raced) > DISAGREE * raced


def against_the_race(raced: float, predicted: float, what: str) -> str:
    """A prediction beside the race that measured the same settings: ``what`` (the prediction's source, in words) and
    its figure, and where it contradicts the race, that the race is trusted."""
    said = f"{what}: {predicted_words(predicted)}"
    if not disagrees(raced, predicted):
        return f"{said}, which the race confirms."
    return (
        f"{said}, more than {DISAGREE:.0%} from the race's {raced:.2f}×: the race is what happened on this machine, "
        "and it is the figure to trust."
    )


def headline_text(raced: float | None, measured_at: str | None, predicted: float | None) -> str:
    """A configuration's one speed figure: the race's measured speedup (``raced``, measured at ``measured_at``), or
    before a race the prediction from this machine's quiet profile (``predicted``; None where there is none: no quiet
    profile, or no trace yet), labelled as such."""
    if raced is not None:
        when = (measured_at or "").replace("T", " ")
        beside = (
            " " + against_the_race(raced, predicted, "This machine's quiet profile at this trace's α")
            if predicted is not None
            else ""
        )
        return (
            f"**Speedup of this configuration: {speedup_words(raced)}, measured** in the race of {when}.{beside} "
            "The figures below are read against the race."
        )
    if predicted is None:
        return "**Speedup of this configuration: not measured yet.** The Race page runs the two decoders on one clock."
    return (
        f"**Speedup of this configuration: not raced yet; {predicted_words(predicted)}** from this machine's quiet "
        "profile at this trace's α (the Race page measures it: both decoders on one clock)."
    )


def a_target(dtype: str) -> str:
    """ "a float32 target", "an int4 target": a target precision with its article (int4 and int8 read "an int")."""
    return f"{'an' if dtype[:1] in 'aeiou' else 'a'} {dtype} target"


def draft_words(fastest: FastestDraft) -> str:
    """A draft choice in words: "the draft model in int8 at γ = 4, stopping below max q = 0.9"."""
    return f"the draft model in {fastest.draft_dtype} at γ = {fastest.gamma}{exit_words(fastest.confidence_exit)}"


def exit_words(confidence_exit: float) -> str:
    """A confidence exit in the words the choice is said in ("" for none)."""
    return f", stopping below max q = {confidence_exit:g}" if confidence_exit else ""


def loses_words(dtype: str, closest: FastestDraft) -> str:
    """Where a quiet replay finds no draft that pays for a ``dtype`` target here, in words, with the one that comes
    ``closest``."""
    return (
        f"No draft pays for {a_target(dtype)} on this machine: the closest, {draft_words(closest)}, replays at "
        f"{closest.speedup:.2f}× its target alone (greedy rounds on held-out text at this machine's quiet costs), "
        "slower than the target alone."
    )


def fastest_text(dtype: str, gamma: int, fastest: FastestDraft, raced: float | None) -> str | None:
    """What a speed page says of this machine's fastest draft for its pair in ``dtype`` (``fastest``, from a quiet
    replay: :func:`~specviz.analysis.replay.fastest_drafts`) beside the sidebar's settings (block ``gamma``, raced at
    ``raced``; None: not raced). None where the sidebar's γ is the fastest, it pays, and nothing contradicts it.

    "No draft pays" is said only while no race contradicts it: a race of these settings that beat the target alone
    is what happened, and the page says the replay was wrong here. A race faster than the fastest's prediction is
    said too: one best γ is named (the replay's), and the race of another γ is quoted, not hidden."""
    if not fastest.pays:
        if raced is not None and raced >= 1:
            return (
                f"The replay at this machine's quiet costs predicted no draft pays for {a_target(dtype)} (the closest, "
                f"{draft_words(fastest)}, at {fastest.speedup:.2f}×), but the race of these settings measured "
                f"**{speedup_words(raced)}**: the race is what happened here, on this prompt, and it is the figure to "
                "trust."
            )
        return f"**{loses_words(dtype, fastest)}** A race of these settings measures by how much."
    chosen = (
        f"This machine's fastest for this pair in {dtype}: **γ = {fastest.gamma}**, the draft in {fastest.draft_dtype}"
        f"{exit_words(fastest.confidence_exit)} ({predicted_words(fastest.speedup)} over its target alone, from greedy "
        "rounds replayed on held-out text at this machine's quiet costs)"
    )
    if raced is not None and (
        disagrees(raced, fastest.speedup) or (raced > fastest.speedup and fastest.gamma != gamma)
    ):
        side = "above" if raced > fastest.speedup else "below"
        return (
            f"{chosen}. The race of these settings (γ = {gamma}) measured {speedup_words(raced)}, {side} that "
            "prediction: on this prompt the race is the figure to trust."
        )
    if fastest.gamma == gamma:
        return None
    return f"{chosen}; this trace drafts γ = {gamma}."
