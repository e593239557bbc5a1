"""The app through streamlit's AppTest, with tiny real models injected at the loader boundary (URL ids)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.ui import shared_work

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def make_app(params: dict[str, str]) -> AppTest:
    # Each run's work is bounded (tiny models, or a few tokens of the embedded one); the generous timeout
    # only keeps a busy 2-core machine from failing a run that is merely slow.
    at = AppTest.from_file(APP, default_timeout=1800)
    for key, value in params.items():
        at.query_params[key] = value
    return at


def html_of(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_round_view_renders_and_steps(tiny_params):
    at = make_app(tiny_params).run()
    assert not at.exception and not at.error
    page = html_of(at)
    for row in ("Decoder input", "Draft", "Verify", "Output", "Next input", "[MASK]"):
        assert row in page
    assert "✓" in page or "✗" in page
    assert "rounds" in page and "target passes" in page
    assert at.subheader[0].value.startswith("Round 1 of")
    charts = at.get("plotly_chart")
    assert len(charts) >= 2  # one p-vs-q chart per drafted token + the correction/bonus chart
    at.button(key="nav_next").click().run()
    assert at.subheader[0].value.startswith("Round 2 of")
    assert at.query_params["round"] == "2"
    at.button(key="nav_last").click().run()
    total = int(at.subheader[0].value.split(" of ")[1].split(":")[0])
    assert at.subheader[0].value.startswith(f"Round {total} of")


def test_a_shared_link_reopens_the_same_configuration(tiny_params):
    """A link with rule and gamma in it (what a teacher shares) opens exactly that trace.

    Editing sidebar widgets is exercised in the real-browser test: AppTest does not re-run the
    entry point's sidebar of an st.navigation app on its reruns.
    """
    at = make_app({**tiny_params, "rule": "sample", "gamma": "5", "seed": "3", "round": "2"}).run()
    assert not at.exception and not at.error
    assert at.subheader[0].value.startswith("Round 2 of")
    assert at.query_params["rule"] == "sample" and at.query_params["gamma"] == "5" and at.query_params["seed"] == "3"
    specs = " ".join(str(c.proto.spec) for c in at.get("plotly_chart"))
    assert "u = " in specs  # speculative sampling shows the uniform draw of every verified token
    again = make_app(dict(at.query_params)).run()  # a second person opening the link the first one's page wrote
    assert [m.value for m in again.markdown] == [m.value for m in at.markdown]


def test_bad_url_values_fall_back_with_a_message(tiny_params):
    at = make_app({**tiny_params, "gamma": "99", "top_p": "abc", "rule": "nonsense", "round": "-3"}).run()
    assert not at.exception and not at.error
    warnings = " ".join(w.value for w in at.warning)
    assert "gamma" in warnings and "top_p" in warnings and "rule" in warnings and "round" in warnings
    assert at.slider(key="gamma").value == 4  # the default


@pytest.mark.parametrize("change,message", [
    ({"target": "no-such-org/no-such-model"}, "Unknown model"),
    ({"prompt": "   "}, "prompt is empty"),
])
def test_bad_input_shows_an_error_not_a_traceback(tiny_params, change, message):
    at = make_app({**tiny_params, **change}).run()
    assert not at.exception
    assert any(message in e.value for e in at.error)


def test_a_missing_draft_model_is_explained(tiny_params):
    at = make_app({**tiny_params, "draft": ""}).run()
    assert not at.exception
    assert any("needs a draft model" in w.value for w in at.warning)


def test_tokenizer_mismatch_is_explained(tiny_params, tiny_dirs):
    at = make_app({**tiny_params, "draft": tiny_dirs["other_vocab"]}).run()
    assert not at.exception
    assert any("different tokenizers" in e.value for e in at.error)


def test_traces_are_cached_across_sessions(tiny_params):
    make_app(tiny_params).run()
    computed = sum(shared_work().computed.values())
    assert computed >= 1
    second = make_app(tiny_params).run()  # another session, same link
    assert not second.exception and second.subheader[0].value.startswith("Round 1 of")
    assert sum(shared_work().computed.values()) == computed


def test_autoplay_advances_one_round_per_tick(tiny_params):
    at = make_app(tiny_params).run()
    assert at.subheader[0].value.startswith("Round 1 of")
    at.toggle(key="autoplay").set_value(True).run()  # a tick of the autoplay fragment
    assert at.subheader[0].value.startswith("Round 2 of")
