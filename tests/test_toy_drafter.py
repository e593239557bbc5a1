"""Adding a drafter = its module + one registry line: a toy drafter registered at run time (tests/toy_drafter.py)
runs in the engine, the CLI and the app with its own setting, and nothing else names it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specviz.cli import main
from specviz.config import DecodeConfig
from specviz.engine import speculative_decode
from specviz.registry.drafters import DRAFTERS, register, unregister
from specviz.settings import param
from specviz.ui.state import Session

from .conftest import TINY_TEXT_PROMPT
from .test_app import make_app
from .test_engine import tiny_config
from .toy_drafter import ENTRY, EchoSettings


@pytest.fixture
def echo():
    register(ENTRY)
    yield ENTRY
    unregister(ENTRY.name)


def test_the_toy_drafter_decodes_exactly_with_its_own_setting(echo, tiny_dirs, tiny_pair):
    config = tiny_config(tiny_dirs, drafter="echo", echo_times=3, max_new_tokens=10)
    trace = speculative_decode(config, prompt_ids=[3, 7, 7, 5], pair=tiny_pair)
    reference = speculative_decode(config.replace(drafter="model"), prompt_ids=[3, 7, 7, 5], pair=tiny_pair)
    assert trace.output_ids == reference.output_ids  # greedy: both are the target's own greedy text
    assert max(len(r.draft) for r in trace.rounds) == 3
    assert trace.to_dict()["config"]["echo_times"] == 3


def test_the_toy_drafter_runs_in_the_cli(echo, tiny_dirs, capsys):
    args = ["trace", "--target", tiny_dirs["target"], "--drafter", "echo", "--echo-times", "4", "--gamma", "5"]
    code = main([*args, "--prompt-ids", "3,7,5", "--max-new-tokens", "6", "--device", "cpu", "--no-timings"])
    trace = json.loads(capsys.readouterr().out)
    assert code == 0 and trace["config"]["drafter"] == "echo" and trace["config"]["echo_times"] == 4
    assert len(trace["output_ids"]) == 6 and max(len(r["draft"]) for r in trace["rounds"]) == 4


@pytest.mark.slow
def test_the_toy_drafter_is_offered_and_runs_in_the_app(echo, tiny_params):
    at = make_app({**tiny_params, "drafter": "echo", "echo_times": "2", "prompt": TINY_TEXT_PROMPT}).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert ENTRY.label in at.radio(key="drafter").options
    assert at.slider(key="echo_times").value == 2 and not at.slider(key="echo_times").disabled
    config = at.session_state[Session.config.key]
    assert config.drafter == "echo" and config.settings(EchoSettings).echo_times == 2


def test_unregistered_the_toy_drafter_is_gone(tiny_dirs):
    assert "echo" not in DRAFTERS
    with pytest.raises(SystemExit):
        main(["trace", "--target", tiny_dirs["target"], "--drafter", "echo", "--prompt-ids", "3,7"])


@dataclasses.dataclass(frozen=True)
class TakenName:
    ngram_max: int = param(3, label="n", help="a setting the n-gram drafter has already")


def test_a_drafter_whose_setting_name_is_taken_is_refused(echo):
    with pytest.raises(ValueError, match="registered already"):
        register(dataclasses.replace(ENTRY, name="taken", settings=TakenName))
    with pytest.raises(ValueError, match="registered already"):
        register(ENTRY)
    assert "taken" not in DRAFTERS and DecodeConfig(ngram_max=6).value("ngram_max") == 6


def test_a_config_made_before_the_drafter_was_registered_reads_its_defaults(tiny_dirs):
    before = tiny_config(tiny_dirs)
    register(ENTRY)
    try:
        assert before.value("echo_times") == before.settings(EchoSettings).echo_times == EchoSettings().echo_times
        assert before.replace(drafter="echo", echo_times=5).validated().value("echo_times") == 5
    finally:
        unregister(ENTRY.name)
