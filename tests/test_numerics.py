"""Precision and rounding: bfloat16 traces keep float32 probabilities; the numerics view finds where a bf16 run departs
from the target's own generate, and finds nothing in float32."""

from __future__ import annotations

import math

import pytest

from specviz.analysis.numerics import match_rate, precision_run
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, speculative_decode
from specviz.models.loading import load_model
from tests.tiny import make_tiny_model

PROMPTS = [[2 + s, 5, 7, 9] for s in range(10)]


@pytest.fixture(scope="module")
def near_tie_dirs(tmp_path_factory) -> tuple[str, str]:
    """A tiny pair with flat logits (a small init): the target's two best tokens are often within a rounding of each
    other."""
    root = tmp_path_factory.mktemp("near-tie")
    target = make_tiny_model(root / "target", seed=1, layers=4, hidden=64, init=0.05)
    return target, make_tiny_model(root / "draft", seed=2, layers=4, hidden=64, like=target, noise=0.3, init=0.05)


def runs_in(dirs: tuple[str, str], dtype: str):
    target, draft = dirs
    pair = ModelPair(load_model(target, "cpu", dtype), load_model(draft, "cpu", dtype))
    config = DecodeConfig(
        target=target, draft=draft, drafter="model", device="cpu", dtype=dtype, max_new_tokens=40, gamma=4
    )
    return [precision_run(config, pair, prompt) for prompt in PROMPTS]


@pytest.mark.slow  # every preset prompt decoded twice
def test_bfloat16_departures_are_found_with_both_computations_gaps(near_tie_dirs):
    runs = runs_in(near_tie_dirs, "bfloat16")
    departed = [r for r in runs if r.departure is not None]
    assert departed, "flat logits in bfloat16 should part at least one of ten prompts"
    for run in departed:
        d = run.departure
        assert run.generate_ids[: d.position] == run.speculative_ids[: d.position]
        assert d.step.ids == (run.generate_ids[d.position], run.speculative_ids[d.position]) == d.verification.ids[::-1]
        # each computation prefers its own token (or ties), by less than bf16 rounds a logit: a near-tie in both
        assert 0 <= d.step.gap < 0.1 and 0 <= d.verification.gap < 0.1
        assert d.pass_tokens >= 2  # computed by a pass over k + 1 tokens, not a one-token step
    rate = match_rate(runs)
    assert rate["dtype"] == "bfloat16" and rate["identical"] == len(runs) - len(departed)
    assert rate["matching_tokens"] == sum(r.matching for r in runs) < rate["tokens"]


@pytest.mark.slow  # every preset prompt decoded twice
def test_float32_on_the_same_prompts_departs_nowhere(near_tie_dirs):
    runs = runs_in(near_tie_dirs, "float32")
    assert all(r.departure is None and r.speculative_ids == r.generate_ids for r in runs)
    assert match_rate(runs)["matching_share"] == 1.0


def test_bfloat16_traces_are_recorded_as_bf16_with_float32_probabilities_that_sum_to_one(tiny_dirs):
    pair = ModelPair(
        load_model(tiny_dirs["target"], "cpu", "bfloat16"), load_model(tiny_dirs["draft"], "cpu", "bfloat16")
    )
    config = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="model",
        device="cpu",
        dtype="bfloat16",
        rule="sample",
        max_new_tokens=12,
        top_n=32,
    )  # 32: the whole tiny vocabulary
    trace = speculative_decode(config, prompt_ids=[3, 7, 5, 9], pair=pair)
    assert trace.models["dtype"] == "bfloat16" and trace.config.dtype == "bfloat16"
    tops = [t for r in trace.rounds for d in r.draft for t in (d.target_top, d.draft_top)]
    tops += [(r.correction or r.bonus).target_top for r in trace.rounds]
    assert tops
    for top in tops:
        assert math.isclose(sum(top.probs), 1.0, abs_tol=1e-5)
        # bfloat16 holds 8 bits of mantissa; a probability carrying more is float32 arithmetic
    assert any(p != float(__import__("torch").tensor(p).bfloat16()) for top in tops for p in top.probs)
