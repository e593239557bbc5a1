"""A student's link reads the class's results and starts no costly work; a long trace waits for a press (AppTest on
the tiny real pair: the logic; tests/test_browser.py: the same promises as a person meets them)."""

from __future__ import annotations

import urllib.parse

import pytest

from specviz.config import DecodeConfig
from specviz.models.profile import PassProfile
from specviz.serving.works import TRACE, Work
from specviz.ui import offers, waiting
from specviz.ui.state import Session

from .test_app import make_app, player_of, students_links
from .test_pages import press

pytestmark = [pytest.mark.slow]  # it runs the app (or loads the embedded pair): the whole suite's lane


def student_link(teacher) -> dict[str, str]:
    """The query of the "Copy link for students" link the teacher's sidebar shows."""
    (link,) = students_links(teacher)
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link).query))


def test_the_students_link_marks_a_student_session_that_every_link_it_writes_keeps(tiny_params):
    teacher = make_app({**tiny_params, "max_new_tokens": "9"}).run()
    query = student_link(teacher)
    assert query["student"] == "1" and "student" not in teacher.query_params  # the teacher's link has no mark
    student = make_app(query).run()
    assert not student.exception and player_of(student)[2]["view"] == "quiz"  # the round's own trace is shown
    student.switch_page("pages/metrics.py").run()
    assert not student.exception and student.query_params["student"] == "1"  # every page's link keeps it
    assert students_links(student) == []  # a student gets no link to hand out


def test_a_bad_student_value_falls_back_to_the_teachers_session_with_a_message(tiny_params):
    at = make_app({**tiny_params, "student": "maybe"}).run()
    assert not at.exception and any("student='maybe' ignored (must be 1 or 0)" in w.value for w in at.warning)
    assert "student" not in at.query_params


def test_a_student_session_starts_no_race_and_cannot_measure_it_again(tiny_params):
    params = {**tiny_params, "max_new_tokens": "7", "seed": "11"}  # a race no other test ran
    student = make_app({**params, "student": "1"})
    student.switch_page("pages/race.py").run()
    assert not student.exception and not any(b.label.startswith("Measure") for b in student.button)
    held = [i.value for i in student.info if "opens once your quiz has answered every round" in i.value]
    assert held  # the race strikes the rejected drafts: a student's unanswered quiz comes first
    teacher = make_app(params)
    teacher.switch_page("pages/race.py").run()
    press(teacher, "Measure the race on this server")
    assert any(b.label.startswith("Measure again") for b in teacher.button)  # the teacher's link can re-time it
    student.run()  # the class's race is there, still held until the quiz is answered
    assert not student.exception and "target alone" not in {m.label for m in student.metric}
    assert not any(b.label.startswith("Measure") for b in student.button)


def lane_times(at) -> str:
    """The race the page shows, as its replay page (every token's measured time, in ms: one measurement's own)."""
    return at.get("iframe")[0].proto.srcdoc


def test_the_class_race_belongs_to_the_session_that_measured_it_first(tiny_params):
    """Another teacher's session (a student on the address bar's link) that presses Measure again measures for itself:
    its race is shown to it alone, the class keeps the first session's; the first session's own Measure again still
    adds to the class's; and the teacher's link (teacher=<key>) opened in a new session owns it too."""
    params = {**tiny_params, "max_new_tokens": "7", "seed": "21"}  # a race no other test ran
    teacher = make_app(params)
    teacher.switch_page("pages/race.py").run()
    press(teacher, "Measure the race on this server")
    class_race = lane_times(teacher)
    other = make_app(params)
    other.switch_page("pages/race.py").run()
    assert lane_times(other) == class_race  # the class's race, shown to every session of the link
    press(other, "Measure again")
    assert not other.exception and any("shown to you alone" in c.value for c in other.caption)
    assert lane_times(other) != class_race
    newcomer = make_app(params)
    newcomer.switch_page("pages/race.py").run()
    assert lane_times(newcomer) == class_race and not any("shown to you alone" in c.value for c in newcomer.caption)
    key = teacher.session_state[Session.teacher_key.key]
    owner = make_app({**params, "teacher": key})
    owner.switch_page("pages/race.py").run()
    assert "teacher" not in owner.query_params  # the key never stays in the address bar
    press(owner, "Measure again")
    assert not any("shown to you alone" in c.value for c in owner.caption)
    newcomer.run()
    assert lane_times(newcomer) != class_race or any("noisy" in w.value for w in newcomer.warning)


def test_a_student_session_shows_no_start_button_for_costly_work(tiny_params):
    params = {**tiny_params, "max_new_tokens": "6", "seed": "12", "student": "1"}
    for page, button in (("what_if", "Decode the second run"), ("parallel_verification", "Time the passes")):
        at = make_app(params)
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception and not at.error, (page, [e.value for e in at.error])
        assert not any(b.label.startswith(button) for b in at.button), page
        said = [i.value for i in at.info]  # not prepared; or, on a page showing how the rounds ended, the quiz first
        assert offers.NOT_PREPARED in said or any("opens once your quiz has answered every round" in i for i in said)


def test_a_trace_estimated_past_the_limit_waits_for_a_press(tiny_params, monkeypatch):
    """The round's own trace starts as its page opens unless its estimate is long; then a press starts it (a
    student's session says it is not prepared). The limit is lowered here: the tiny pair decodes in no time."""
    monkeypatch.setattr(waiting, "TRACE_ON_OPEN_S", 0.0)
    params = {**tiny_params, "max_new_tokens": "5", "seed": "13"}
    student = make_app({**params, "student": "1"}).run()
    assert not student.exception and not student.get("iframe")
    assert any(i.value == offers.NOT_PREPARED for i in student.info)
    at = make_app(params).run()
    assert not at.exception and not at.get("iframe")
    decode = next(b for b in at.button if b.label.startswith("Decode this trace"))
    assert "here)" in decode.label  # its estimate, said on the button
    decode.click().run()
    assert not at.exception and player_of(at)[0]["rounds"]


def test_a_long_prompt_estimates_a_trace_past_what_opens_on_its_own():
    """The estimate a trace waits on (serving/estimates.py): the work at the one-token step plus the prompt's
    pass, so a 4,000-character prompt on a 1.5B target waits for a press while the default prompt on the embedded
    pair opens."""
    config = DecodeConfig(device="cpu", max_new_tokens=64)
    large = profile(step_ms=150.0)  # about a 1.5B target on a laptop's CPU
    small = profile(step_ms=8.0)  # about the embedded 135M target
    trace = Work(TRACE, config, "x")
    assert trace.estimated_seconds(small, 40) < waiting.TRACE_ON_OPEN_S < trace.estimated_seconds(large, 4000 // 3)
    assert (
        trace.estimated_seconds(large, 4000 // 3) > trace.estimated_seconds(large, 40) + 10
    )  # the prompt is predicted


def profile(step_ms: float) -> PassProfile:
    """A machine profile whose pass over n = 1..9 tokens costs one step, then grows (a CPU's usual shape)."""
    return PassProfile(
        "m",
        "full",
        "float32",
        "default",
        "cpu",
        "cpu",
        "torch",
        64,
        tuple(step_ms * max(1, n / 3) for n in range(1, 10)),
        1,
    )
