"""``python -m specviz race``: the Race page's measurement on the command line, as JSON (#52)."""

from __future__ import annotations

import json

from specviz.cli import main
from tests.conftest import TINY_TEXT_PROMPT


def test_the_race_writes_both_lanes_the_speedup_and_the_peak_memory(tiny_dirs, tmp_path):
    out = tmp_path / "race.json"
    args = ["race", "--target", tiny_dirs["target"], "--draft", tiny_dirs["draft"], "--drafter", "model"]
    args += ["--device", "cpu", "--gamma", "3", "--max-new-tokens", "10", "--prompt", TINY_TEXT_PROMPT]
    assert main([*args, "--out", str(out)]) == 0
    race = json.loads(out.read_text())
    alone, speculative = race["target_alone"], race["speculative"]
    assert len(alone["output_ids"]) == len(speculative["output_ids"]) == 10
    # greedy in float32: the speculative lane writes the target's own ids (Leviathan et al. 2023, Thm. 3.1)
    assert race["identical"] is True and speculative["output_ids"] == alone["output_ids"]
    for lane in (alone, speculative):
        assert lane["wall_s"] > 0 and abs(lane["tokens_per_s"] - 10 / lane["wall_s"]) < 1e-9
    assert abs(race["speedup"] - alone["wall_s"] / speculative["wall_s"]) < 1e-9
    assert 0 < race["peak_rss_gb"] < 64


def test_a_bad_race_option_is_a_message_not_a_traceback(capsys):
    assert main(["race", "--target", "no/such-model-anywhere", "--device", "cpu", "--out", "-"]) == 2
    assert "error:" in capsys.readouterr().err
