"""What a page may say about speed (specviz.analysis.claims): the race is the truth, a prediction is worded as one,
and "no draft pays" is said only where no race contradicts it."""

from __future__ import annotations

from specviz.analysis.claims import a_target, against_the_race, disagrees, fastest_text, headline_text
from specviz.analysis.replay import FastestDraft

LOSING = FastestDraft("int4", 2, 0.69, 20.0, 0.6)  # the replay of item 1: the closest draft at 0.69x
PAYING = FastestDraft("int4", 8, 1.43, 40.0, 0.6)


def test_a_prediction_is_worded_as_one_and_the_race_wins_where_they_disagree():
    # 2.05x predicted beside a race of 1.71x: 0.34 apart, under a quarter of 1.71 (0.43): the race confirms it
    assert not disagrees(1.71, 2.05) and "which the race confirms" in against_the_race(1.71, 2.05, "theory")
    # 0.69x predicted beside a race of 2.08x: 1.39 apart, far over a quarter of 2.08 (0.52)
    said = against_the_race(2.08, 0.69, "the replay")
    assert disagrees(2.08, 0.69) and "the race is what happened" in said and "predicted 0.69×" in said
    headline = headline_text(2.08, "2026-12-07T10:00:00+00:00", 0.69)
    assert headline.startswith("**Speedup of this configuration: 2.08× faster, measured**")
    assert "0.69× faster" not in headline and "figure to trust" in headline
    before = headline_text(None, None, 2.05)
    assert "predicted 2.05×" in before and "faster" not in before and "not raced yet" in before
    assert "not measured yet" in headline_text(None, None, None)


def test_a_target_precision_takes_its_article():
    assert (a_target("int4"), a_target("int8"), a_target("float32")) == (
        "an int4 target",
        "an int8 target",
        "a float32 target",
    )


def test_no_draft_pays_is_said_only_while_no_race_contradicts_it():
    quiet_replay = fastest_text("float32", 2, LOSING, None)
    assert quiet_replay is not None and "No draft pays for a float32 target" in quiet_replay
    raced_slower = fastest_text("float32", 2, LOSING, 0.9)
    assert raced_slower is not None and "No draft pays" in raced_slower  # the race confirms the replay
    raced_faster = fastest_text("float32", 2, LOSING, 2.08)
    assert raced_faster is not None and "No draft pays" not in raced_faster and "slower" not in raced_faster
    assert "2.08× faster" in raced_faster and "the race is what happened" in raced_faster


def test_the_fastest_draft_is_a_prediction_and_a_faster_race_is_quoted_beside_it():
    assert fastest_text("float32", 8, PAYING, None) is None  # the sidebar's γ is the fastest: nothing to add
    other = fastest_text("float32", 2, PAYING, None)
    assert other is not None and "γ = 8" in other and "predicted 1.43×" in other and "this trace drafts γ = 2" in other
    beaten = fastest_text("float32", 2, PAYING, 1.71)  # item 6: raced at 1.71x, above the 1.43x predicted
    assert beaten is not None and "measured 1.71× faster, above that prediction" in beaten
    close = fastest_text("float32", 2, PAYING, 1.35)  # slower than predicted, within a quarter: nothing to say
    assert close is not None and "prediction:" not in close
    same = fastest_text("float32", 8, PAYING, 0.9)  # the fastest itself raced far below its prediction
    assert same is not None and "measured 0.90× (slower), below that prediction" in same
