"""What serving engines report, read and explained (#54): each engine's format from its fixture
(tests/data/engine_reports, README there) against numbers computed by hand, bad input as a message, the explanation
against specviz.rules.theory, the app's own export read back, and ``python -m specviz engine-report``."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from specviz.cli import main
from specviz.config import DecodeConfig
from specviz.rules.theory import best_gamma, expected_speedup, expected_tokens_per_round
from specviz.server_reports.explain import explain, iid_alpha
from specviz.server_reports.export import drafting_run, vllm_prometheus, vllm_request_json
from specviz.server_reports.reading import read_engine_report
from specviz.settings import ConfigError

DATA = Path(__file__).parent / "data" / "engine_reports"
PROMPT = [3, 7, 5, 9, 3, 7]

# file: (engine, drafts, drafted, accepted, acceptance rate, mean acceptance length, per position, k), by hand
EXPECTED = {
    # 100 drafts of 4; 80, 60, 40, 20 accepted at positions 0..3 (sum 200)
    "vllm_metrics.prom": ("vllm", 100, 400, 200, 200 / 400, 1 + 200 / 100, (0.8, 0.6, 0.4, 0.2), 4),
    # two windows of k = 4: 400 / 4 = 100 drafts and 200 / 4 = 50; rates weighed by them
    "vllm_log.txt": (
        "vllm",
        150,
        600,
        315,
        315 / 600,
        1 + 315 / 150,
        (
            (0.8 * 100 + 0.9 * 50) / 150,
            (0.6 * 100 + 0.7 * 50) / 150,
            (0.35 * 100 + 0.5 * 50) / 150,
            (0.15 * 100 + 0.4 * 50) / 150,
        ),
        4,
    ),  # fmt: skip
    # vLLM PR #24127's own line: 295 drafted / k = 5 = 59 drafts
    "vllm_log_pr24127.txt": ("vllm", 59, 295, 262, 262 / 295, 1 + 262 / 59, (0.983, 0.949, 0.915, 0.881, 0.712), 5),
    # per_step_accepted 3,1,0,2,3,3,0,1: 6 steps accepted >= 1, 4 >= 2, 3 >= 3
    "vllm_request.json": ("vllm", 8, 24, 13, 13 / 24, 1 + 13 / 8, (6 / 8, 4 / 8, 3 / 8), 3),
    # detailed, 10 steps of up to 4 (two drafted fewer): accepted 4,2,0,2,4,1,3,0,4,3 of 4,4,4,2,4,4,3,4,4,4
    "vllm_request_steps.json": ("vllm", 10, 37, 23, 23 / 37, 1 + 23 / 10, (8 / 10, 7 / 10, 5 / 10, 3 / 10), 4),
    # the vLLM docs' example: histogram [39, 1, 0, 3]
    "vllm_request_docs.json": ("vllm", 43, 129, 10, 10 / 129, 1 + 10 / 43, (4 / 43, 3 / 43, 3 / 43), 3),
    # three windows: accept len 3.2, 2.8, 3.0 and rate 0.55, 0.45, 0.50; (L - 1) / r = 4 drafted per round
    "sglang_decode.log": ("sglang", None, None, None, 0.5, 3.0, None, 4),
    "sglang_metrics.prom": ("sglang", None, None, None, 0.55, 3.2, None, 4),
    # two /generate answers, k = 3: 10 + 16 steps, 21 + 24 of 30 + 48 proposed; histograms [1,2,2,5] + [3,5,5,3]
    "sglang_generate.json": ("sglang", 26, 78, 45, 45 / 78, 1 + 45 / 26, (22 / 26, 15 / 26, 8 / 26), 3),
    # llama.cpp PR #24536's own statistics line
    "llamacpp_server_pr24536.log": ("llama.cpp", 87, 259, 167, 167 / 259, 1 + 167 / 87, (0.805, 0.632, 0.483), 3),
    "llamacpp_server.log": ("llama.cpp", None, 150, 90, 0.6, 2.8, (0.76, 0.64, 0.40), 3),
    "llamacpp_speculative.log": ("llama.cpp", None, 120, 76, 76 / 120, None, None, 5),
    # llama-server's /metrics: 120 drafts, 204 of 342 accepted, 96 / 66 / 42 of them at positions 0..2
    "llamacpp_metrics.prom": ("llama.cpp", 120, 342, 204, 204 / 342, 1 + 204 / 120, (0.8, 0.55, 0.35), 3),
    # llama.cpp PR #12603's timings
    "llamacpp_completion.json": ("llama.cpp", None, 347, 65, 65 / 347, None, None, None),
    # captured here (README): the server's last statistics line, cumulative over its two requests (27 accept calls)
    "llamacpp_qwen_server.log": (
        "llama.cpp",
        27,
        106,
        92,
        92 / 106,
        1 + 92 / 27,
        (0.963, 0.889, 0.778, 0.778),
        4,
    ),  # fmt: skip
    # its two responses: the last one's timings
    "llamacpp_qwen_responses.json": ("llama.cpp", None, 52, 43, 43 / 52, None, None, None),
}


def read(name: str, **changes: str) -> str:
    text = (DATA / name).read_text()
    for old, new in changes.items():
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_format_gives_the_numbers_computed_by_hand(name):
    engine, drafts, drafted, accepted, rate, length, per_position, k = EXPECTED[name]
    report = read_engine_report(read(name))
    assert (report.engine, report.drafts, report.draft_tokens, report.accepted_tokens) == (
        engine,
        drafts,
        drafted,
        accepted,
    )
    assert report.acceptance_rate == pytest.approx(rate, abs=1e-12)
    assert report.mean_acceptance_length == (None if length is None else pytest.approx(length, abs=1e-12))
    assert report.per_position == (None if per_position is None else pytest.approx(per_position, abs=1e-12))
    assert report.draft_length == k
    assert read_engine_report(read(name), engine).to_dict() == report.to_dict()  # the engine named: the same


def test_the_captured_llamacpp_run_agrees_with_itself_request_by_request():
    """The real run (two greedy requests, k = 4; README): each response's timings, each request's print_timing lines
    and the cumulative statistics line, computed by hand from the counts they print."""
    log = read("llamacpp_qwen_server.log")
    first, second = (read_engine_report(json.dumps(r)) for r in json.loads(read("llamacpp_qwen_responses.json")))
    assert (first.draft_tokens, first.accepted_tokens, second.draft_tokens, second.accepted_tokens) == (54, 49, 52, 43)
    # the log up to the second request's lines: the first request's statistics, 14 drafts (accept calls)
    alone = read_engine_report(log[: log.index("task 16 | draft acceptance")])
    assert (alone.drafts, alone.draft_tokens, alone.accepted_tokens) == (14, 54, 49)
    assert alone.mean_acceptance_length == 1 + 49 / 14 == 4.5
    assert alone.per_position == pytest.approx((14 / 14, 13 / 14, 11 / 14, 11 / 14), abs=0.0005)
    # the second request's print_timing lines alone: 43 of 52, mean len 4.31 = 1 + 43 / 13 (27 - 14 accept calls)
    timing = read_engine_report("\n".join(line for line in log.splitlines() if "task 16" in line))
    assert (timing.source, timing.draft_tokens, timing.accepted_tokens) == ("server print_timing", 52, 43)
    assert timing.mean_acceptance_length == 4.31 == round(1 + 43 / 13, 2)
    assert timing.per_position == pytest.approx((12 / 13, 11 / 13, 10 / 13, 10 / 13), abs=0.0005)
    # the cumulative line is the two requests summed: 54 + 52 drafted, 49 + 43 accepted, 14 + 13 drafts
    whole = read_engine_report(log)
    assert (whole.draft_tokens, whole.accepted_tokens, whole.drafts) == (54 + 52, 49 + 43, 14 + 13)
    assert whole.per_position == pytest.approx((26 / 27, 24 / 27, 21 / 27, 21 / 27), abs=0.0005)
    assert explain(whole).verdict.startswith("your acceptance is fine")  # 4.41 tokens per pass at k = 4


def test_vllm_counters_read_without_total_and_summed_over_engines():
    plain = read_engine_report(read("vllm_metrics.prom", _total=""))
    assert plain.to_dict() == read_engine_report(read("vllm_metrics.prom")).to_dict()
    text = read("vllm_metrics.prom")
    two_engines = text + "\n".join(line.replace('engine="0"', 'engine="1"') for line in text.splitlines())
    doubled = read_engine_report(two_engines)
    assert (doubled.drafts, doubled.draft_tokens, doubled.accepted_tokens) == (200, 800, 400)
    assert doubled.per_position == pytest.approx((0.8, 0.6, 0.4, 0.2))


def test_older_formats_of_the_same_lines():
    old_llama = "slot print_timing: id  0 | task 5 | draft acceptance rate = 0.71901 (  174 accepted /   242 generated)"
    report = read_engine_report(old_llama)
    assert (report.draft_tokens, report.accepted_tokens, report.mean_acceptance_length) == (242, 174, None)
    # SGLang from PR #11572 to #23530 printed accept len / (k + 1): 3.2 / 5 = 0.64 is k = 4, 2.2 / 4 = 0.55 accepted
    older = read_engine_report(
        read("sglang_decode.log").splitlines()[1].replace("accept rate: 0.55", "accept rate: 0.64")
    )
    assert (older.draft_length, older.acceptance_rate) == (4, pytest.approx(0.55))
    gauges = 'sglang:spec_accept_length{tp_rank="0"} 3.2\nsglang:spec_num_draft_tokens{tp_rank="0"} 5\n'
    newer = read_engine_report(gauges)  # k = 5 - 1 drafted tokens, 2.2 of them accepted per pass
    assert (newer.draft_length, newer.acceptance_rate, newer.mean_acceptance_length) == (4, pytest.approx(0.55), 3.2)
    old_vllm = (
        "SpecDecoding metrics: Draft acceptance rate: 100.0%, Accepted: 66 tokens, Drafted: 66 tokens"  # PR #15902
    )
    report = read_engine_report(old_vllm)
    assert (report.drafts, report.acceptance_rate, report.mean_acceptance_length, report.per_position) == (
        None,
        1.0,
        None,
        None,
    )


def test_llamacpps_counters_read_at_the_digits_it_prints_them_and_before_any_position():
    """llama-server writes the three totals as C++ doubles (6 significant digits) and the positions exactly."""
    big = read(
        "llamacpp_metrics.prom",
        **{"_total 342\n": "_total 3.42009e+06\n", "_total 204\n": "_total 2.04001e+06\n"},
        **{"_total 120\n": "_total 1.2e+06\n", '"0"} 96': '"0"} 960004', '"1"} 66': '"1"} 660003'},
        **{'"2"} 42': '"2"} 420004'},
    )
    report = read_engine_report(big)  # the positions add up to 2040011: 2.04001e+06 to its 6 digits
    assert (report.drafts, report.draft_tokens, report.accepted_tokens) == (1_200_000, 3_420_090, 2_040_010)
    assert report.per_position == pytest.approx((0.8, 0.55, 0.35), abs=1e-5)
    with pytest.raises(ConfigError, match="add up to 2040021 accepted tokens"):
        read_engine_report(big.replace('"2"} 420004', '"2"} 420014'))
    # no speculative request finished yet: no per-position counter; a server that never drafted: zeros
    text = read("llamacpp_metrics.prom")
    text = text[: text.index("# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos")]
    before = read_engine_report(text)
    assert (before.per_position, before.draft_length, before.mean_acceptance_length) == (None, None, 2.7)
    with pytest.raises(ConfigError, match="no drafted tokens: speculative decoding never ran"):
        read_engine_report(re.sub(r"(spec_decode_\w+_total) \d+", r"\1 0", text))


def test_sglangs_meta_info_request_by_request_and_in_older_builds_names():
    responses = json.loads(read("sglang_generate.json"))
    first = read_engine_report(json.dumps(responses[0]))  # one /generate answer: 21 of 30 over 10 steps
    assert (first.drafts, first.draft_tokens, first.accepted_tokens, first.draft_length) == (10, 30, 21, 3)
    assert first.mean_acceptance_length == 1 + 21 / 10  # SGLang's own 3.2 counts the prefill's token too
    assert first.per_position == pytest.approx((9 / 10, 7 / 10, 5 / 10))  # histogram [1, 2, 2, 5]
    whole = read_engine_report(read("sglang_generate.json")).to_dict()
    for correct, proposed in (
        ("spec_accepted_drafts", "spec_proposed_drafts"),
        ("spec_accept_token_num", "spec_draft_token_num"),
    ):
        older = [  # the same requests as builds before spec_num_correct_drafts wrote them
            {
                "meta_info": {
                    key: r["meta_info"][key]
                    for key in ("completion_tokens", "spec_accept_rate", "spec_accept_length", "spec_verify_ct")
                }
                | {
                    correct: r["meta_info"]["spec_num_correct_drafts"],
                    proposed: r["meta_info"]["spec_num_proposed_drafts"],
                }
                | {"spec_accept_histogram": r["meta_info"]["spec_correct_drafts_histogram"]}
            }
            for r in responses
        ]
        assert read_engine_report(json.dumps(older), "sglang").to_dict() == whole
    # the oldest builds write spec_verify_ct alone: SGLang's accept length, completion tokens per step, only
    bare = [{"meta_info": {k: r["meta_info"][k] for k in ("completion_tokens", "spec_verify_ct")}} for r in responses]
    report = read_engine_report(json.dumps(bare))
    assert (report.drafts, report.acceptance_rate, report.mean_acceptance_length) == (None, None, (32 + 41) / 26)


def test_vllms_per_step_arrays_in_a_response_and_in_the_offline_output():
    """The detailed level's per-step arrays give what the summary gives and more: a draft shorter than k counts."""
    response = json.loads(read("vllm_request_steps.json"))
    metrics = response["metrics"]["speculative_decoding"]
    summary = {key: value for key, value in metrics.items() if not key.startswith("per_step_")}
    by_histogram = read_engine_report(json.dumps({"metrics": {"speculative_decoding": summary}}))
    by_steps = read_engine_report(read("vllm_request_steps.json"))
    assert (by_histogram.source, by_steps.source) == ("per-request JSON", "per-request JSON, per step")
    assert by_histogram.to_dict() | {"source": ""} == by_steps.to_dict() | {"source": ""}
    # the offline CompletionOutput.spec_decode_metrics: its histogram and the arrays, no summary; a list pools steps
    offline = {"num_spec_tokens": 4, "histogram": metrics["acceptance_histogram"], "num_draft_tokens": 37}
    offline |= {key: metrics[key] for key in ("per_step_accepted", "per_step_drafted")}
    pooled = read_engine_report(json.dumps([offline, offline]))
    assert (pooled.drafts, pooled.draft_tokens, pooled.accepted_tokens) == (20, 74, 46)
    assert (pooled.per_position, pooled.draft_length) == (by_steps.per_position, 4)
    bad = [
        ({"per_step_accepted": [4, 2, 0, 3, 4, 1, 3, 0, 4, 3]}, "step 4 accepted 3 of 2 drafted tokens"),
        ({"per_step_drafted": [4, 4, 4]}, "10 steps in per_step_accepted, 3 in per_step_drafted"),
        ({"per_step_accepted": [4, 2, 0, 2, 4, 2, 3, 0, 4, 2]}, "does not give the histogram"),
        ({"num_draft_tokens": 40, "draft_acceptance_rate": 23 / 40}, "adds up to 37 tokens, num_draft_tokens is 40"),
    ]
    for change, message in bad:
        with pytest.raises(ConfigError, match=message):
            read_engine_report(json.dumps({"metrics": {"speculative_decoding": metrics | change}}))


CUT_LOG = read("vllm_log.txt").splitlines()[1]


@pytest.mark.parametrize(
    ("text", "engine", "message"),
    [
        ("   ", None, "Nothing to read"),
        ("hello, this is not a report", None, "not a speculative decoding report"),
        (read("vllm_metrics.prom"), "llama.cpp", "reads as vllm's /metrics text"),
        (read("vllm_request.json")[:300], None, "does not parse at line"),
        (read("vllm_request.json", **{'"num_spec_steps": 8': '"num_spec_steps": 9'}), None, "sums to 8 steps"),
        (read("vllm_request.json", **{"[2, 2, 1, 3]": "[2, 3, 0, 3]"}), None, "holds 12 accepted drafts"),
        (
            read("vllm_request.json", **{'"num_draft_tokens": 24': '"num_draft_tokens": -24'}),
            None,
            "cannot be negative",
        ),
        (read("vllm_metrics.prom", **{"} 200.0": "} -200.0"}), None, "cannot be negative"),
        (read("vllm_metrics.prom")[:-70], None, "not a whole sample"),
        (
            read("vllm_metrics.prom", num_accepted_tokens_total="x"),
            None,
            "expected vllm:spec_decode_num_accepted_tokens",
        ),
        (read("vllm_metrics.prom", **{"} 400.0": "} 100.0"}), None, "impossible"),
        (CUT_LOG[: CUT_LOG.index("Drafted:")], None, "expected 'Drafted: N tokens'"),
        (CUT_LOG[: CUT_LOG.index("0.350")], None, "a list cut short"),
        ('{"metrics": {"speculative_decoding": null}}', None, "is null"),
        ('{"a": ' * 5000 + '{"speculative_decoding": 1}' + "}" * 5000, None, "nested too deeply"),
        ('{"content": "hi", "timings": {"prompt_n": 3, "predicted_n": 8}}', None, "carry no draft_n"),
        (read("llamacpp_server.log").replace("(   90 accepted", "(   90 acc\n"), None, "N accepted / M generated"),
        (read("llamacpp_server_pr24536.log").replace(", #acc tokens", "\n"), "llama.cpp", "expected '#acc tokens'"),
        (read("llamacpp_metrics.prom"), "vllm", "reads as llama.cpp's /metrics text"),
        (
            read("llamacpp_metrics.prom", **{'position="2"': 'position="3"'}),
            None,
            "per-position counters for positions",
        ),
        (read("sglang_generate.json", **{'rate": 0.7,': 'rate": 0.75,'}), None, "0.75 is not 21 accepted / 30"),
        (read("sglang_generate.json", **{"[1, 2, 2, 5]": "[1, 2, 3, 4]"}), None, "does not give 10 steps and 21"),
        ('{"meta_info": {"spec_verify_ct": 0, "completion_tokens": 9}}', None, "speculative decoding never ran"),
        (
            "[2026-03-02 10:14:06 TP0] Decode batch, #running-req: 1, accept len: 0.50, accept rate: 0.5",
            None,
            "below 1",
        ),
    ],
)
def test_bad_input_is_a_message_saying_what_was_expected(text, engine, message):
    with pytest.raises(ConfigError, match="(?s).*" + message.replace("(", r"\(").replace("?", r"\?")):
        read_engine_report(text, engine)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_paste_cut_anywhere_reads_or_says_why(name):
    """Never another exception: every cut of every fixture either reads or raises a ConfigError."""
    text = read(name)
    for end in range(1, len(text), 5):
        try:
            read_engine_report(text[:end])
        except ConfigError as exc:
            assert str(exc)


def test_the_explanation_is_the_theory_at_the_reported_alpha():
    report = read_engine_report(read("vllm_metrics.prom"))  # 3 tokens per pass at k = 4
    explained = explain(report, c=0.6, gammas=(3, 5), verify_costs=(1.1, 1.3))
    alpha = explained.alpha
    assert expected_tokens_per_round(alpha, 4) == pytest.approx(3.0, abs=1e-12) and alpha == iid_alpha(3.0, 4)
    assert [p.theory for p in explained.positions] == pytest.approx([alpha**i for i in (1, 2, 3, 4)])
    assert [p.conditional for p in explained.positions] == pytest.approx([0.8, 0.6 / 0.8, 0.4 / 0.6, 0.2 / 0.4])
    for estimate, gamma, v in zip(explained.predictions, (3, 5), (1.1, 1.3), strict=True):
        assert estimate.tokens_per_pass == expected_tokens_per_round(alpha, gamma)
        assert estimate.speedup == expected_speedup(alpha, gamma, 0.6, v) and estimate.cost == pytest.approx(
            gamma * 0.6 + v
        )
    assert explained.best_gamma == best_gamma(alpha, 0.6)
    assert explained.cliff is None
    # alpha = 0.74 at c = 0.6, v = 1.3: 3.22 tokens per pass for 4.3 target steps
    assert (
        "your acceptance is fine (alpha = 0.74); your draft costs c = 0.6 of a target step, so gamma 5 cannot pay"
        in (explain(report, c=0.6, gammas=(5,), verify_costs=(1.3,)).verdict)
    )
    assert "cannot pay even at alpha = 1" in explain(report, c=1.2, gammas=(4,)).verdict  # 5 tokens for 4 c + 1 = 5.8


def test_a_curve_that_falls_off_at_one_position_is_a_cliff_there():
    # 100 drafts of 4 accepting 0.9, then 0.9 of those, then 0.1 / 0.81: the third position is broken
    changes = {
        "length: 2.90": "length: 2.86",
        "Accepted: 190": "Accepted: 186",
        "0.800, 0.600, 0.350, 0.150": "0.900, 0.810, 0.100, 0.050",
    }
    line = CUT_LOG
    for old, new in changes.items():
        line = line.replace(old, new)
    explained = explain(read_engine_report(line))
    assert explained.cliff is not None and explained.cliff.position == 3
    assert explained.cliff.conditional == pytest.approx(0.1 / 0.81)
    assert "falls off a cliff at position 3" in explained.verdict


def test_bad_costs_are_messages():
    report = read_engine_report(read("vllm_metrics.prom"))
    for bad in (dict(c=-0.1), dict(c=0.4, gammas=(0,)), dict(c=0.4, gammas=(3, 5), verify_costs=(1.0, 1.0, 1.0))):
        with pytest.raises(ConfigError):
            explain(report, **bad)


@pytest.fixture(scope="module", params=["chain", "tree"])
def trace(request, tiny_dirs, tiny_pair):
    from specviz.engine import speculative_decode

    config = DecodeConfig(
        target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", rule="sample", gamma=4,
        max_new_tokens=30, seed=2, device="cpu",
    )  # fmt: skip
    if request.param == "tree":
        config = config.replace(drafter="tree", rule="greedy", tree_mode="constant", branching=2, tree_depth=3)
    return speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)


def test_the_apps_own_export_reads_back_to_the_traces_numbers(trace):
    stats = trace.stats
    accepted = [r.accepted_count for r in trace.rounds if r.drafted_count]
    assert stats.accepted_tokens > 0 and len(set(accepted)) > 1  # the run accepted some drafts, not all
    run = drafting_run(trace)
    for text in (vllm_prometheus(run), vllm_request_json(run)):
        report = read_engine_report(text, "vllm")
        assert report.acceptance_rate == stats.acceptance_rate
        assert report.mean_acceptance_length == stats.mean_acceptance_length
        assert (report.draft_tokens, report.accepted_tokens, report.drafts) == (
            stats.drafted_tokens, stats.accepted_tokens, len(accepted))  # fmt: skip
        k = report.draft_length
        assert report.per_position == tuple(sum(a >= i for a in accepted) / len(accepted) for i in range(1, k + 1))
    exported = json.loads(vllm_request_json(run))["metrics"]["speculative_decoding"]
    assert exported["per_step_accepted"] == accepted
    assert exported["acceptance_histogram"] == [accepted.count(j) for j in range(exported["num_spec_tokens"] + 1)]


def test_the_command_prints_the_one_shape_or_the_explanation(capsys):
    assert main(["engine-report", str(DATA / "llamacpp_server_pr24536.log"), "--json"]) == 0
    shape = json.loads(capsys.readouterr().out)
    assert shape == read_engine_report(read("llamacpp_server_pr24536.log")).to_dict()
    assert list(shape) == [
        "engine", "source", "drafts", "draft_tokens", "accepted_tokens", "acceptance_rate", "mean_acceptance_length",
        "per_position", "draft_length",
    ]  # fmt: skip
    assert main(["engine-report", str(DATA / "vllm_metrics.prom"), "--c", "0.6", "--gamma", "5", "--v", "1.3"]) == 0
    out = capsys.readouterr().out
    assert "mean acceptance length 3.00" in out and "so gamma 5 cannot pay" in out


def test_the_command_reads_stdin(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(read("sglang_decode.log")))
    assert main(["engine-report", "-", "--json", "--engine", "sglang"]) == 0
    assert json.loads(capsys.readouterr().out)["mean_acceptance_length"] == pytest.approx(3.0)


def test_the_command_says_what_is_wrong(capsys, tmp_path):
    for args in (
        [str(tmp_path / "missing.txt")],
        [str(DATA / "vllm_metrics.prom"), "--engine", "sglang"],
        [str(DATA / "vllm_metrics.prom"), "--c", "-1"],
    ):
        assert main(["engine-report", *args]) == 2
        assert capsys.readouterr().err.startswith("error: ")
