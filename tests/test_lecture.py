"""A lecture prepared in advance: recorded while rehearsing, saved and loaded as a file, computed in the background;
then every recorded page shows its results without starting a computation."""

from __future__ import annotations

import pytest

from specviz.config import DecodeConfig
from specviz.serving.lecture import MAX_RECORDINGS, LecturePlan, new_recording, prepare, recording
from specviz.serving.pool import shared_work
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
    plan = LecturePlan.from_json(recorded.to_json())  # offered, pressed or not
    assert plan.links and all("prompt=w5" in link for link in plan.links)  # (AppTest gives every page one path)

    preparation = prepare(plan, shared_work())
    assert preparation.finished.wait(1800)
    assert preparation.failed == [] and preparation.done == preparation.total == len(plan.works)

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
            assert "fastest γ, timed" in shown
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
