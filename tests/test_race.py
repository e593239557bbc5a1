"""The race: the target alone and speculative decoding on one clock, measured on the tiny real pair."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from specviz.analysis.claims import headline_text, speedup_words
from specviz.analysis.race import (
    Lane,
    Race,
    agreement,
    lane_choices,
    load_signs,
    run_race,
    slowdown_over,
)
from specviz.config import DecodeConfig
from specviz.engine import autoregressive_decode, speculative_decode
from specviz.models.pair import prompt_ids_for
from specviz.presentation.race import race_page
from specviz.server_reports.export import drafting_run, vllm_prometheus
from specviz.server_reports.reading import read_engine_report
from specviz.serving import jsoncodec
from specviz.serving.pool import shared_work, shown_attempt

from .conftest import TINY_TEXT_PROMPT
from .test_app import make_app
from .test_machine import profile_of


@pytest.fixture(scope="module")
def race_config(tiny_dirs) -> DecodeConfig:
    return DecodeConfig(
        target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", max_new_tokens=20, gamma=3, device="cpu"
    )


@pytest.fixture(scope="module")
def race(race_config, tiny_pair) -> Race:
    return run_race([(race_config, tiny_pair), (race_config.replace(drafter="ngram"), tiny_pair)], TINY_TEXT_PROMPT)


def test_each_lanes_replay_is_monotone_and_the_speedup_is_the_wall_time_ratio(race):
    for lane in race.lanes:
        times = [arrival.at_ms for arrival in lane.arrivals]
        assert times == sorted(times) and times[0] > 0
        assert times[-1] <= lane.total_ms  # the lane's clock stops at its measured wall time, after its last token
        assert sum(len(arrival.tokens) for arrival in lane.arrivals) == len(lane.output_ids)
        for arrival in lane.arrivals:
            if arrival.drafted_at_ms is not None:
                assert arrival.drafted_at_ms <= arrival.at_ms
    assert race.lanes[0].name == "target alone" and len(race.lanes[0].arrivals) == len(race.lanes[0].output_ids)
    for lane in race.lanes[1:]:
        assert race.speedup(lane) == race.lanes[0].total_ms / lane.total_ms
    assert race.headline == race.speedup(race.lanes[1])


def test_greedy_float32_lanes_end_with_the_targets_own_text(race, race_config, tiny_pair):
    target = race.lanes[0]
    assert all(lane.output_ids == target.output_ids for lane in race.lanes)
    assert all(said.startswith("Identical: 20 of 20 tokens") for said in race.agreements)
    again = speculative_decode(race_config, prompt=TINY_TEXT_PROMPT, pair=tiny_pair)
    assert tuple(again.output_ids) == race.lanes[1].output_ids  # the lane is the engine's own trace


def test_both_lanes_record_each_token_their_target_emits_alike(race_config, tiny_pair):
    """Equal terms: the target alone builds, inside its clock, the record a speculative round builds of each token
    its target emits (text, probability, top tokens): the same record, the same numbers."""
    ids = prompt_ids_for(tiny_pair, race_config, TINY_TEXT_PROMPT, None)
    records = []
    out, _ = autoregressive_decode(race_config, tiny_pair, ids, lambda record, ms: records.append(record))
    trace = speculative_decode(race_config, prompt_ids=ids, pair=tiny_pair)
    assert [r.token_id for r in records] == out == trace.output_ids
    for rnd in trace.rounds:
        theirs = rnd.bonus or rnd.correction
        assert theirs is not None
        ours = records[rnd.prefix_len - len(ids) + len(rnd.emitted_ids) - 1]
        assert type(ours) is type(theirs) and (ours.token_id, ours.text) == (theirs.token_id, theirs.text)
        assert ours.target_top.ids == theirs.target_top.ids and len(ours.target_top.ids) == race_config.top_n
        assert ours.prob == pytest.approx(theirs.prob, abs=1e-4)


def test_a_round_lands_its_accepted_tokens_then_the_targets_token(race):
    for arrival in race.lanes[1].arrivals:
        accepted = arrival.kinds.count("accepted")
        assert arrival.kinds[:accepted] == ("accepted",) * accepted
        assert set(arrival.kinds[accepted:]) <= {"correction", "bonus"}
        assert len(arrival.struck) <= len(arrival.drafted)
        if arrival.struck:
            assert arrival.kinds[-1] == "correction"


def test_the_page_embeds_the_race_it_replays(race):
    page = race_page(race)
    data = json.loads(re.search(r'data-race="data">(.*?)</script>', page, re.S).group(1))
    assert [lane["total_ms"] for lane in data["lanes"]] == [lane.total_ms for lane in race.lanes]
    assert data["lanes"][1]["arrivals"][0]["tokens"] == list(race.lanes[1].arrivals[0].tokens)
    assert "<script" not in json.dumps(data)  # the prompt and tokens cannot close the data's script element


def test_each_speculative_lane_keeps_its_rounds_as_vllm_counts_them(race, race_config, tiny_pair):
    """A lane's export (the Race page's downloads in vLLM's names) is its own run's: the engine's trace counted as
    vLLM counts it, read back to that trace's acceptance."""
    again = speculative_decode(race_config, prompt=TINY_TEXT_PROMPT, pair=tiny_pair)
    assert race.lanes[0].drafting is None and race.lanes[1].drafting == drafting_run(again)
    for lane in race.lanes[1:]:
        run = lane.drafting
        report = read_engine_report(vllm_prometheus(run), "vllm")
        counts = (report.draft_tokens, report.accepted_tokens, report.drafts)
        assert counts == (run.drafted, run.accepted, len(run.rounds))
    assert race.lanes[1].drafting.accepted == again.stats.accepted_tokens > 0


def test_a_race_goes_through_the_replicas_json_store(race):
    assert jsoncodec.decode(json.loads(json.dumps(jsoncodec.encode(race)))) == race


def lane(
    name: str, slowdown: float | None, cpu_share: float = 1.0, total_ms: float = 1000.0, others: float | None = 0.0
) -> Lane:
    return Lane(name, (), total_ms, (), "", slowdown, cpu_share=cpu_share, other_cores=others)


def test_a_lane_slowed_more_than_the_others_is_a_sign_of_load():
    assert load_signs((lane("target alone", 1.5), lane("speculative", 1.6))) == ()  # both lanes alike: quiet
    signs = load_signs((lane("target alone", 2.4), lane("speculative", 1.5)))
    assert len(signs) == 1 and "target alone ran at 2.40×" in signs[0]


def test_a_load_constant_through_the_race_is_a_sign_of_load_and_a_quiet_race_is_not_flagged():
    """A constant load slows both lanes alike, so their steps agree; the decoding thread's share of a core tells it
    apart. A quiet race, each lane's thread on a core and its steps as the profile's, shows no sign."""
    loaded = load_signs((lane("target alone", 3.9, cpu_share=0.3), lane("speculative", 3.8, cpu_share=0.35)))
    assert len(loaded) == 2 and "while target alone ran, the timing thread had 30% of a core" in loaded[0]
    assert load_signs((lane("target alone", 1.05, cpu_share=0.97), lane("speculative", 1.1, cpu_share=0.95))) == ()
    # two processes beside the app, each lane's thread still on its core: the OS saw the other cores busy
    beside = load_signs((lane("target alone", 1.1, others=1.8), lane("speculative", 1.1, others=1.9)))
    assert beside == (
        "while target alone ran, other processes kept 1.8 cores busy",
        "while speculative ran, other processes kept 1.9 cores busy",
    )
    idle_browser = (lane("target alone", 1.05, others=0.05), lane("speculative", 1.08, others=0.04))
    assert load_signs(idle_browser) == ()


def test_a_lane_predicted_from_a_busy_profile_is_not_compared():
    """A profile measured under load predicts a lane too slow, and a quiet lane would look faster than the others: its
    slowdown is not known, and the race is not flagged for it."""
    quiet = profile_of((20.0,) * 9)
    busy = dataclasses.replace(quiet, pass_ms=(80.0,) * 9, spread=1.19, cpu_share=0.3)
    assert slowdown_over(420.0, 400.0, quiet, None) == 1.05 and slowdown_over(420.0, 1600.0, quiet, busy) is None
    assert load_signs((lane("target alone", 1.05), lane("speculative", None))) == ()


def test_a_race_slower_than_the_target_alone_says_slower_never_faster():
    assert speedup_words(1.36) == "1.36× faster" and speedup_words(0.97) == "0.97× (slower)"
    slower = Race((lane("target alone", 1.0), lane("speculative", 1.0, total_ms=1031.0)), ("",), "", "", "", "", ())
    said = headline_text(slower.headline, slower.measured_at, 0.15)
    assert "0.97× (slower), measured" in said and "predicted 0.15×" in said and "faster" not in said
    assert "predicted 1.36×" in headline_text(None, None, 1.36) and "faster" not in headline_text(None, None, 1.36)
    page = race_page(slower)
    assert "× (slower)`" in page and "speedup(lane) < 1" in page  # the replay words it and colours it so


def shown_race(races: list[Race]) -> tuple[Race | None, Race | None]:
    return shown_attempt(races, lambda race: race.noisy)


def test_pages_show_the_latest_quiet_race_and_say_when_a_later_one_was_disturbed(race):
    race = dataclasses.replace(race, load=())  # the tiny pair's millisecond steps are noisy: declared quiet here
    noisy = dataclasses.replace(race, load=("busy",), measured_at="later")
    assert shown_race([]) == (None, None)
    assert shown_race([race]) == (race, None)
    assert shown_race([race, noisy]) == (race, noisy)
    assert shown_race([noisy]) == (noisy, None)
    quieter = dataclasses.replace(race, measured_at="latest")
    assert shown_race([race, noisy, quieter]) == (quieter, None)


def test_the_agreement_says_what_the_rule_and_precision_promise(race_config):
    same, other = (1, 2, 3, 4), (1, 2, 9, 4)
    assert agreement(race_config, same, same).startswith("Identical: 4 of 4")
    assert agreement(race_config.replace(dtype="bfloat16"), same, other).startswith("Identical up to rounding: 2 of 4")
    assert "same seed gives another text" in agreement(race_config.replace(rule="sample"), same, other)
    assert agreement(race_config, same, other).startswith("2 of 4 tokens identical")


def test_lanes_on_request_leave_out_what_the_pair_cannot_run(race_config):
    choices = lane_choices(race_config)
    assert "model" not in choices and "ngram" in choices  # the sidebar's own drafter is lane 1 already
    assert "model" not in lane_choices(race_config.replace(drafter="ngram", draft=None))
    assert not any(c in lane_choices(race_config) for c in ("eagle", "blockwise"))  # weights for the embedded target


@pytest.mark.slow
def test_the_race_page_measures_once_for_every_session(tiny_params):
    params = {**tiny_params, "max_new_tokens": "10"}
    raced = len(shared_work().durations.get("Race", []))
    at = make_app(params).run()
    at.switch_page("pages/race.py").run()
    assert not at.exception, at.exception
    start = next(b for b in at.button if b.label.startswith("Measure the race on this server"))
    assert re.search(r"\((about \d+ s|under a second) here\)", start.label)  # predicted before it runs
    start.click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    metrics = {m.label: m for m in at.metric}
    assert set(metrics) == {"target alone", "speculative: draft model, γ = 3"}
    assert re.fullmatch(r"\d+\.\d\d× (faster|\(slower\))", metrics["speculative: draft model, γ = 3"].delta)
    assert any(m.value.startswith("**speculative: draft model, γ = 3**: Identical: 10 of 10") for m in at.markdown)
    assert len(at.get("iframe")) == 1
    exports = [b.label for b in at.get("download_button") if b.label.startswith("vLLM's")]
    assert exports == ["vLLM's /metrics of this run (Prometheus)", "vLLM's per-request metrics of this run (JSON)"]
    # a second session on the same link sees the same race, with no press and no second computation
    other = make_app(params).run()
    other.switch_page("pages/race.py").run()
    assert {m.label: m.value for m in other.metric} == {m.label: m.value for m in at.metric}
    assert any(b.label.startswith("Measure again") for b in other.button)
    assert len(shared_work().durations["Race"]) == raced + 1


@pytest.mark.slow
def test_every_speed_page_quotes_the_races_speedup_once_a_race_was_run(tiny_params, monkeypatch):
    from specviz.models.profile import PassProfile

    monkeypatch.setattr(PassProfile, "quiet", True)  # the tiny pair's sub-millisecond passes count as quiet here
    params = {**tiny_params, "max_new_tokens": "8", "gamma": "2"}
    at = make_app(params).run()
    at.switch_page("pages/metrics.py").run()
    before = [i.value for i in at.info if i.value.startswith("**Speedup of this configuration")]
    assert "not raced yet; predicted" in before[0] and "faster" not in before[0]  # before a race: labelled
    at.switch_page("pages/race.py").run()
    next(b for b in at.button if b.label.startswith("Measure the race on this server")).click().run()
    measured = next(m for m in at.metric if m.label.startswith("speculative")).delta
    for page in ("metrics", "parallel_verification"):
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, at.exception
        quoted = [i.value for i in at.info if i.value.startswith("**Speedup of this configuration")]
        assert quoted and quoted[0].startswith(f"**Speedup of this configuration: {measured}, measured** in the race")
