"""A lecture prepared in advance: recorded while rehearsing, saved and loaded as a file, computed in the background;
then every recorded page shows its results without starting a computation."""

from __future__ import annotations

import pytest

from specviz.config import DecodeConfig
from specviz.serving.estimates import RUNNING_LEFT_S, pace, plan_left
from specviz.serving.lecture import (
    MAX_RECORDINGS,
    PREPARATIONS,
    LecturePlan,
    Preparation,
    is_stored,
    new_recording,
    prepare,
    recording,
    stored_keys,
)
from specviz.serving.pool import shared_work
from specviz.serving.sharedwork import SharedWork
from specviz.serving.works import TRACE, Work
from specviz.settings import ConfigError
from specviz.ui.state import Session

from .test_app import make_app

PAGES = ("round_view", "metrics", "gamma_sweep", "race", "compare_rules")


def computations() -> int:
    """How many results the process's work pool has computed so far (every label)."""
    return sum(len(times) for times in shared_work().durations.values())


def test_a_plan_file_round_trips_and_refuses_what_it_cannot_run(tiny_dirs):
    config = DecodeConfig(target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", gamma=3, device="cpu")
    plan = LecturePlan(
        ("http://host/metrics?gamma=3",),
        (Work(TRACE, config, "w3 w7"), Work("sweep", config, "w3 w7", ((1, 2, 4),)), Work("race", config, "w3", ((),))),
    )
    again = LecturePlan.from_json(plan.to_json())
    assert again == plan and [w.key for w in again.works] == [w.key for w in plan.works]
    for text, says in [
        ("not json", "not JSON"),
        ('{"format": "other"}', "not a lecture plan"),
        (plan.to_json().replace('"sweep"', '"rm -rf"'), "unknown computation"),
        (plan.to_json().replace('"gamma": 3', '"gamma": 999'), "gamma"),
        (plan.to_json().replace('"gamma": 3', '"no_such_setting": 3'), "malformed"),
    ]:
        with pytest.raises(ConfigError, match=says):
            LecturePlan.from_json(text)


@pytest.mark.slow
def test_after_preparing_every_recorded_page_runs_without_starting_a_computation(tiny_params):
    params = {**tiny_params, "prompt": "w5 w9 w5 w9 w5", "max_new_tokens": "8", "seed": "7"}  # nothing stored yet
    rehearsal = make_app(params).run()
    rehearsal.switch_page("pages/lecture.py").run()
    rehearsal.toggle[0].set_value(True).run()
    assert rehearsal.toggle[0].value
    for page in PAGES:
        rehearsal.switch_page(f"pages/{page}.py").run()
        assert not rehearsal.exception, (page, rehearsal.exception)
    rehearsal.switch_page("pages/lecture.py").run()
    assert rehearsal.toggle[0].value  # the recording, not the toggle's state, which the other pages dropped
    rehearsal.toggle[0].set_value(False).run()
    assert not rehearsal.toggle[0].value
    recorded = recording(rehearsal.session_state[Session.recorder.key]).plan()  # off: the plan is kept
    assert {TRACE, "speedup", "sweep", "race", "rules", "departures"} <= {w.name for w in recorded.works}
    assert recorded.links and all("prompt=w5" in link for link in recorded.links)  # (AppTest: one path per page)

    rehearsal.toggle[0].set_value(True).run()  # on again: pressing Prepare stops it, and the page says so
    stored_before = sum(row == "✓" for row in rehearsal.dataframe[0].value["stored"])
    assert stored_before > 0  # the pages decoded their traces while recording
    [press] = [b for b in rehearsal.button if b.label == f"Prepare the lecture ({len(recorded.works)} computations)"]
    press.click().run()
    assert not rehearsal.toggle[0].value and not recording(rehearsal.session_state[Session.recorder.key]).on
    assert any("Recording stopped: the lecture is" in info.value for info in rehearsal.info)
    preparation = PREPARATIONS[-1]
    assert preparation.plan == recorded
    assert preparation.finished.wait(1800)
    assert preparation.failed == [] and preparation.total == len(recorded.works)
    assert preparation.progress(stored_keys(shared_work(), recorded.works)) == preparation.total
    rehearsal.run()
    assert f"Prepared: {preparation.total} of {preparation.total}" in rehearsal.success[0].value
    assert list(rehearsal.dataframe[0].value["stored"]) == ["✓"] * preparation.total

    before = computations()
    lecture = make_app(params).run()  # a student's session, in front of the class
    for page in PAGES:
        lecture.switch_page(f"pages/{page}.py").run()
        assert not lecture.exception and not lecture.error, (page, lecture.exception)
        shown = {m.label for m in lecture.metric}
        if page == "metrics":
            assert "timed ratio" in shown  # the live timing is there with no press
        if page == "race":
            assert "target alone" in shown
        if page == "gamma_sweep":
            assert "fastest γ in this sweep" in shown
    assert computations() == before  # nothing was computed in front of the class


def test_a_recording_notes_each_work_and_link_once_and_only_while_on(tiny_dirs):
    config = DecodeConfig(target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", device="cpu")
    trace, sweep = Work(TRACE, config, "w3"), Work("sweep", config, "w3", ((1, 2),))
    recorder, taken = new_recording()
    taken.note(trace, "/metrics?a=1")  # off: nothing
    taken.on = True
    for work, link in [(trace, "/metrics?a=1"), (sweep, "/gamma_sweep?a=1"), (trace, "/metrics?a=1")]:
        taken.note(work, link)
    taken.on = False
    taken.note(Work(TRACE, config, "w5"), "/?a=2")
    assert recording(recorder) is taken and recording("not an id") is None and recording("") is None
    assert taken.plan() == LecturePlan(("/metrics?a=1", "/gamma_sweep?a=1"), (trace, sweep))
    for _ in range(MAX_RECORDINGS):
        new_recording()
    assert recording(recorder) is None  # the server keeps the latest recordings only


def test_the_time_left_follows_the_machines_measured_pace():
    """An estimate three times too low moves to three times; a running work counts down, never to nothing, and one
    running past its estimate slows the pace before it ends (no clock: durations are fed in)."""
    assert pace([]) == 1.0 and pace([(10.0, 30.0)]) == 3.0 and pace([(10.0, 30.0), (20.0, 60.0)]) == 3.0
    assert plan_left((10.0, 0.0), [10.0, 10.0], []) == 30.0  # before any evidence: the estimates
    assert plan_left((10.0, 0.0), [10.0], [(10.0, 30.0)]) == 60.0  # the first took 3x its estimate: so do the rest
    assert plan_left((10.0, 12.0), [10.0], [(10.0, 30.0)]) == 48.0  # counts down as the running one runs
    assert plan_left((10.0, 29.0), [], [(10.0, 30.0)]) == RUNNING_LEFT_S  # running: not done
    assert plan_left((10.0, 100.0), [10.0], [(10.0, 30.0)]) == RUNNING_LEFT_S + 65.0  # pace (30 + 100) / 20
    assert plan_left((10.0, 0.0), [10.0], [(10.0, 5.0)]) == 10.0  # a fast machine: half the estimates
    assert plan_left(None, [], [(10.0, 5.0)]) == 0.0


def test_a_preparation_counts_what_is_stored_skips_it_and_stops_the_recording(tiny_dirs):
    config = DecodeConfig(target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", device="cpu")
    config = config.replace(max_new_tokens=4)
    works = tuple(Work(TRACE, config, prompt) for prompt in ("w3 w7", "w5 w9", "w7 w3"))
    pool = SharedWork(max_bytes=2**26)
    pool.submit(works[1].first_key, works[1].compute, "rehearsal", works[1].label).finished.wait()
    _, taken = new_recording()
    taken.on = True

    preparation = prepare(LecturePlan((), works), pool, lambda work: 2.0, taken)
    assert preparation.progress(stored_keys(pool, works)) >= 1  # the result stored before it began counts at once
    assert not taken.on and preparation.stopped is taken  # pages opened now add nothing to the plan
    taken.note(Work(TRACE, config, "w9"), "/?late=1")
    assert taken.plan().works == ()
    assert preparation.finished.wait(600)
    assert preparation.failed == [] and preparation.progress(stored_keys(pool, works)) == 3 and not preparation.running
    assert [estimate for estimate, _ in preparation.paced] == [2.0, 2.0]  # the stored one was not computed again
    assert preparation.remaining_s(stored_keys(pool, works), 0.0) == 0.0


def test_the_time_left_skips_stored_works_and_counts_unestimated_ones_at_the_mean(tiny_dirs):
    config = DecodeConfig(target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", device="cpu")
    works = tuple(Work(TRACE, config, f"w{i}") for i in range(5))
    pool = SharedWork(max_bytes=2**20)
    pool.submit(works[3].first_key, lambda progress: "done", "rehearsal", "stored").finished.wait()
    assert is_stored(pool, works[3]) and not is_stored(pool, works[2])
    preparation = Preparation(LecturePlan((), works), lambda work: None, [10.0, 30.0, None, 50.0, 10.0], (1, 100.0))
    preparation.paced.append((10.0, 20.0))  # the first took twice its estimate
    # running: 2 x 30 - 15 s run; waiting: the not yet estimated one at the mean (25), the stored one at nothing, the
    # last
    assert preparation.remaining_s(stored_keys(pool, works), 115.0) == 45.0 + 2 * (25.0 + 10.0)
    assert Preparation(LecturePlan((), works), lambda work: None, [None] * 5).remaining_s(set(), 0.0) is None
