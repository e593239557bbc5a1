"""The machine profile and the fastest exact kernel path: measured on tiny real models, exact on both paths."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time

import pytest
import torch
from safetensors import safe_open
from torch import nn

from specviz.analysis import metrics, roofline, timing
from specviz.analysis import replay as draft_replay
from specviz.analysis.lab import chi_square_power, goodness_of_fit, output_law
from specviz.cli import main
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, speculative_decode
from specviz.models import pass_timing
from specviz.models import profile as machine_profile
from specviz.models.loading import load_model
from specviz.models.pass_timing import PROFILE_TOKENS
from specviz.models.profile import KERNELS_VAR, PassProfile, keep_if_quiet, load_words, pass_profile, profile_file
from specviz.models.rates import MachineRates
from specviz.rules.distributions import softmax32
from specviz.rules.sampling import BrokenResidualRule
from specviz.rules.theory import expected_speedup
from specviz.runtime.cpu.kernel_paths import DEFAULT, ONEDNN, PackedLinear, kernels_of, use_kernels
from specviz.runtime.llama_step import llama_weights
from specviz.runtime.machine import matrix_units_in_words
from specviz.runtime.reference import full_forward
from tests.tiny import make_tiny_pair

from .conftest import target_greedy
from .test_engine import PROMPT


def load_on(path: str, dirs: dict[str, str], dtype: str = "float32") -> ModelPair:
    """The tiny pair loaded with the kernel path forced (a fresh copy per path: models are cached per directory)."""
    before = os.environ.get(KERNELS_VAR)
    os.environ[KERNELS_VAR] = path
    try:
        return ModelPair(load_model(dirs["target"], "cpu", dtype), load_model(dirs["draft"], "cpu", dtype))
    finally:
        os.environ.pop(KERNELS_VAR) if before is None else os.environ.__setitem__(KERNELS_VAR, before)


@pytest.fixture(scope="module")
def onednn(tmp_path_factory) -> tuple[dict[str, str], ModelPair]:
    dirs = make_tiny_pair(tmp_path_factory.mktemp("onednn"))
    return dirs, load_on(ONEDNN, dirs)


def config_for(dirs, **changes) -> DecodeConfig:
    return DecodeConfig(
        target=dirs["target"],
        draft=dirs["draft"],
        drafter="model",
        rule="greedy",
        gamma=4,
        max_new_tokens=24,
        device="cpu",
    ).replace(**changes)


@pytest.fixture(scope="module")
def tiny_pair_profiled(onednn, tmp_path_factory):
    """A cache holding the tiny pair's machine profiles in every precision (and this machine's compiled kernels),
    measured once for the module; its chosen defaults left out, so each test that takes a copy
    (:func:`profiled_cache`) measures them as a first start does, without timing every pass again."""
    from specviz.analysis import defaults

    cache = tmp_path_factory.mktemp("profiled")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECVIZ_CACHE", str(cache))
        patch.setattr(PassProfile, "quiet", True)
        defaults.measure_pair_defaults(config_for(onednn[0]))
    for chosen in cache.rglob("defaults-*"):
        chosen.unlink()
    return cache


@pytest.fixture
def profiled_cache(tiny_pair_profiled, tmp_path, monkeypatch):
    """$SPECVIZ_CACHE: a copy of :func:`tiny_pair_profiled`'s, this test's own."""
    cache = tmp_path / "cache"
    shutil.copytree(tiny_pair_profiled, cache)
    monkeypatch.setenv("SPECVIZ_CACHE", str(cache))
    return cache


def test_the_switch_packs_every_linear_layer_and_keeps_the_parameters(onednn):
    _, pair = onednn
    for loaded in (pair.target, pair.draft):
        assert kernels_of(loaded.model) == ONEDNN
        assert not any(type(m) is nn.Linear for m in loaded.model.modules())
        assert set(loaded.profiles) == {DEFAULT, ONEDNN}  # both measured, the forced one taken
    packed = pair.target.model.lm_head
    assert isinstance(packed, PackedLinear) and "packed" not in dict(pair.target.model.named_buffers())
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        fast = pair.target.model(ids).logits
        use_kernels(pair.target.model, DEFAULT)
        plain = pair.target.model(ids).logits
        use_kernels(pair.target.model, ONEDNN)
    # two exact float32 kernels: equal up to the order of the additions, never bf16-sized differences
    assert torch.allclose(fast, plain, atol=1e-4) and kernels_of(pair.target.model) == ONEDNN


@pytest.mark.parametrize("gamma", [2, 5])
def test_greedy_on_the_fast_path_is_the_targets_own_greedy(onednn, gamma):
    dirs, pair = onednn
    trace = speculative_decode(config_for(dirs, gamma=gamma), prompt_ids=PROMPT, pair=pair)
    assert trace.output_ids == target_greedy(pair.target, PROMPT, 24)
    assert {p.status for r in trace.rounds for p in r.draft} >= {"accepted", "rejected"}


def test_greedy_trees_on_the_fast_path_are_the_targets_own_greedy(onednn):
    dirs, pair = onednn
    config = config_for(dirs, drafter="tree", tree_mode="constant", branching=2, tree_depth=3)
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=pair)
    assert trace.output_ids == target_greedy(pair.target, PROMPT, 24)
    assert any(r.tree.path for r in trace.rounds)


def test_generate_the_engine_and_the_drafts_lean_step_multiply_through_the_same_packed_kernels(onednn):
    dirs, pair = onednn
    calls = []
    hook = pair.target.model.lm_head.register_forward_hook(lambda *_: calls.append(1))
    target_greedy(pair.target, PROMPT, 4)
    assert len(calls) == 4  # transformers' generate: one packed head product per token
    speculative_decode(config_for(dirs, max_new_tokens=8), prompt_ids=PROMPT, pair=pair)
    assert len(calls) > 4  # the engine's verification passes: the same packed module
    hook.remove()
    layer = llama_weights(pair.draft.model).layers[0]  # the draft's direct Llama step reads the packed weights
    assert all(getattr(layer, name).packed is not None for name in ("q", "k", "v", "o", "gate", "up", "down"))


@pytest.mark.slow  # a statistical test at its computed power: many samples
def test_speculative_sampling_on_the_fast_path_is_lossless(onednn):
    dirs, pair = onednn
    n = 800
    with torch.inference_mode():
        p = softmax32(pair.target.model(torch.tensor([PROMPT])).logits[0, -1])
        q = softmax32(pair.draft.model(torch.tensor([PROMPT])).logits[0, -1])
    broken = output_law(BrokenResidualRule(), p, q)
    assert chi_square_power(p, broken, n, level=1e-3) > 0.999  # this n can tell the broken rule from the right one
    config = config_for(dirs, rule="sample", gamma=3, max_new_tokens=2)
    tokens = [speculative_decode(config.replace(seed=s), prompt_ids=PROMPT, pair=pair).output_ids[0] for s in range(n)]
    assert goodness_of_fit(tokens, p) > 1e-3
    assert goodness_of_fit(tokens, broken) < 1e-3


def test_the_profile_is_measured_once_and_read_back(onednn, monkeypatch):
    monkeypatch.setattr(machine_profile, "MEASURE_AGAIN_S", float("inf"))  # a busy one is not measured again here
    dirs, pair = onednn
    loaded = pair.target
    profile = loaded.profiles[ONEDNN]
    assert len(profile.pass_ms) == PROFILE_TOKENS and all(ms > 0 for ms in profile.pass_ms)
    with safe_open(os.path.join(dirs["target"], "model.safetensors"), "pt") as stored:
        streamed = [stored.get_tensor(name) for name in stored.keys() if "embed_tokens" not in name]
    assert profile.weight_bytes == sum(t.numel() * 4 for t in streamed)  # untied: the input embedding is not streamed
    assert profile.bandwidth_gbs > 0 and set(profile.verify_costs) == set(range(1, PROFILE_TOKENS))
    assert 0 <= profile.flat_until() <= PROFILE_TOKENS - 1 and profile.cpu and profile.torch == torch.__version__
    assert pass_profile(loaded, full_forward) is profile  # measured once per process
    path = profile_file(loaded, "full")
    if profile.quiet:  # kept for every later process; a busy one never is
        with open(path, encoding="utf-8") as f:
            assert PassProfile.from_dict(json.load(f)) == profile
    else:
        assert not os.path.exists(path) or PassProfile.from_dict(json.loads(open(path).read())).quiet


def test_only_a_quiet_profile_is_kept_and_nothing_replaces_it(tmp_path):
    quiet, busy = profile_of((10.0,) * 9), dataclasses.replace(profile_of((10.0,) * 9), spread=2.0)
    path = str(tmp_path / "profile.json")
    assert not keep_if_quiet(path, busy) and not os.path.exists(path)  # a busy measurement is never the machine's
    assert keep_if_quiet(path, quiet) and PassProfile.from_dict(json.loads(open(path).read())) == quiet
    assert not keep_if_quiet(path, dataclasses.replace(quiet, pass_ms=(9.0,) * 9))  # the quiet one stays
    # a load constant through every round: the rounds agree (spread 1.19), the timing thread had a third of a core
    constant = dataclasses.replace(profile_of((645.0,) * 9), spread=1.19, cpu_share=0.3)
    assert not constant.quiet and not keep_if_quiet(str(tmp_path / "busy.json"), constant)
    # another process kept one and a half cores busy: the timing thread had its core, the rounds agree, yet busy
    beside = dataclasses.replace(profile_of((20.0,) * 9), spread=1.1, cpu_share=0.95, other_cores=1.5)
    assert not beside.quiet and load_words(beside) == "other processes kept 1.5 cores busy"
    idle_browser = dataclasses.replace(beside, other_cores=0.04)  # a few hundredths of a core: quiet
    assert idle_browser.quiet and load_words(idle_browser) == ""
    assert "the timing thread had 30% of a core" in roofline.speed_sentence(constant)
    assert "busy" not in roofline.speed_sentence(quiet)


def test_the_other_processes_cores_are_the_machines_busy_time_less_this_processs(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    ticks = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal: 300 busy ticks, idle and iowait not counted
    stat.write_text(f"cpu  {ticks} 0 {ticks} 9999 77 0 0 {ticks} 0 0\ncpu0 1 2 3\n")
    assert pass_timing.machine_busy_seconds(str(stat)) == 3.0
    assert pass_timing.machine_busy_seconds(str(tmp_path / "none")) is None
    before = pass_timing.Clock(wall=10.0, thread_cpu=4.0, process_cpu=5.0, machine_busy=100.0)
    after = pass_timing.Clock(wall=12.0, thread_cpu=5.0, process_cpu=7.0, machine_busy=105.0)
    monkeypatch.setattr(pass_timing, "thread_clock", lambda: after)
    # the machine was busy 5 s in 2 s of wall time, 2 s of them this process's: others kept 1.5 cores busy
    assert pass_timing.other_cores(before) == 1.5
    assert pass_timing.other_cores(before._replace(machine_busy=None)) is None


def test_the_cpu_share_is_the_threads_cpu_time_over_the_wall_time(monkeypatch):
    monkeypatch.setattr(pass_timing, "thread_clock", lambda: pass_timing.Clock(12.0, 4.5, 9.0, None))
    # 0.5 s of CPU in 2 s: the thread waited 3/4 of the time
    assert pass_timing.cpu_share(pass_timing.Clock(10.0, 4.0, 5.0, None)) == 0.25


def test_a_busy_profile_is_this_processs_alone_the_least_loaded_and_measured_again_until_quiet(
    onednn, tmp_path, monkeypatch
):
    """Measured under load (here a constant one: its rounds agree), a profile serves this process alone, the least
    loaded of its attempts, never written to disk; it is measured again later (and by the next process), and the first
    quiet measurement is kept for all."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    _, pair = onednn
    timings = iter(
        [
            pass_timing.Timed((60.0,) * 9, 1.19, 0.3, 0.0),
            pass_timing.Timed((40.0,) * 9, 1.19, 0.4, 0.0),
            pass_timing.Timed((12.0,) * 9, 1.05, 0.97, 0.02),
        ]
    )
    monkeypatch.setattr(machine_profile, "time_passes", lambda *args, **kwargs: next(timings))
    path = profile_file(pair.draft, "full")
    busy = pass_profile(pair.draft, full_forward)
    assert busy.step_ms == 40.0 and not busy.quiet  # two attempts, the least loaded kept
    assert not os.path.exists(path)  # never the machine's
    assert pass_profile(pair.draft, full_forward) is busy  # this process's until measured again
    monkeypatch.setattr(machine_profile, "MEASURE_AGAIN_S", 0.0)
    again = pass_profile(pair.draft, full_forward)
    assert again.step_ms == 12.0 and again.quiet and PassProfile.from_dict(json.loads(open(path).read())) == again


def test_a_changed_precision_kernel_path_or_torch_version_is_another_profile(onednn, monkeypatch):
    dirs, pair = onednn
    fast = profile_file(pair.target, "full")
    bf16 = load_model(dirs["target"], "cpu", "bfloat16")
    assert profile_file(bf16, "full") != fast
    use_kernels(pair.target.model, DEFAULT)
    assert profile_file(pair.target, "full") != fast
    use_kernels(pair.target.model, ONEDNN)
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert profile_file(pair.target, "full") != fast


def profile_of(pass_ms: tuple[float, ...], weight_bytes: int = 10**9) -> PassProfile:
    return PassProfile(
        model="m",
        forward="full",
        dtype="float32",
        kernels=ONEDNN,
        device="cpu",
        cpu="CPU",
        torch=torch.__version__,
        context=128,
        pass_ms=pass_ms,
        weight_bytes=weight_bytes,
    )


def test_the_speed_sentence_and_the_best_gamma_come_from_the_measured_costs():
    flat = profile_of((10.0,) * 9)
    linear = profile_of(tuple(10.0 * n for n in range(1, 10)))
    assert "10.0 ms" in roofline.speed_sentence(flat) and "up to k = 8" in roofline.speed_sentence(flat)
    assert "growing with k" in roofline.speed_sentence(linear)
    # a flat pass makes long blocks pay; a pass that costs k + 1 steps makes the shortest block the best
    assert roofline.best_predicted_gamma(0.8, 0.05, flat) > 3 and roofline.best_predicted_gamma(0.8, 0.05, linear) == 1
    assert matrix_units_in_words(frozenset({"avx2"})).startswith("AVX2 only")
    assert matrix_units_in_words(frozenset({"avx512f", "avx512_bf16"})).startswith("AVX-512 with bfloat16")
    assert matrix_units_in_words(frozenset({"amx_bf16", "avx512_bf16"})).startswith("AMX")


def test_the_roofline_table_puts_each_pass_beside_its_bounds():
    target = profile_of((20.0, 21.0, 22.0, 23.0, 24.0, 26.0, 28.0, 30.0, 32.0), weight_bytes=4 * 10**8)
    table = roofline.roofline_table(target, profile_of((2.0,) * 9), MachineRates(40.0, {"float32": 500.0}))
    assert list(table.tokens) == list(range(1, 10))
    assert table.memory_bound_ms.nunique() == 1 and table.memory_bound_ms[0] == pytest.approx(10.0)  # 0.4 GB / 40 GB/s
    assert table.compute_bound_ms[8] == pytest.approx(9 * table.compute_bound_ms[0])  # 2 N (k + 1) / rate
    assert table.compute_bound_ms[0] == pytest.approx(2 * 10**8 / 500e9 * 1e3)
    assert list(table.verify_cost) == pytest.approx([ms / 20.0 for ms in target.pass_ms])


def test_load_is_told_apart_from_speculation():
    loaded = metrics.SpeedupCheck(1.0, 2.05, 0.1, 1.36, 1.2, (2.11, 2.16, 0.85))
    signs = metrics.load_signs(loaded)
    assert len(signs) == 2 and "disagree" in signs[0] and "above the 1.36×" in signs[1]
    quiet = metrics.SpeedupCheck(1.0, 1.3, 0.1, 1.36, 1.2, (1.28, 1.3, 1.33))
    assert metrics.load_signs(quiet) == []
    # the pairs agree, yet the OS saw other processes keep nearly two cores busy: said, with how much
    beside = dataclasses.replace(quiet, other_cores=1.9)
    assert metrics.load_signs(beside) == ["other processes kept 1.9 cores busy"]
    assert metrics.load_signs(dataclasses.replace(quiet, other_cores=0.05)) == []  # an idle browser: quiet


def test_one_hiccup_among_five_repeats_is_no_load_and_a_lasting_one_is():
    from specviz.analysis.paired import disagree

    assert not disagree([1.0, 1.02, 1.6, 1.05, 1.01])  # one repeat the VM held up: left out
    assert disagree([1.0, 1.5, 1.55, 1.6, 1.02])  # three of five slowed: a load
    assert disagree([1.0, 1.5, 1.1])  # three pairs: each counts
    timed = {"ratios": [2.0, 2.05, 1.98, 2.01, 2.02], "other_cores": 0.02}
    assert not timing.timed_under_load(timed) and timing.load_words(timed) == []
    assert timing.load_words({**timed, "other_cores": 1.2}) == ["other processes kept 1.2 cores busy"]


def test_the_cli_prints_the_machine_profile(onednn, capsys, profiled_cache):
    dirs, _ = onednn
    assert (
        main(["machine", "--target", dirs["target"], "--draft", dirs["draft"], "--drafter", "model", "--device", "cpu"])
        == 0
    )
    out = capsys.readouterr().out
    assert "read bandwidth" in out and "onednn (chosen)" in out and "Measured on this machine" in out
    assert "memory_bound_ms" in out and "best gamma predicted at v(k)" in out


def test_the_c_every_page_predicts_with_is_the_one_the_cli_prints(onednn, capsys, monkeypatch):
    """The app's configuration (here with a confidence exit, which ends a round and changes no pass) reads the draft's
    one profile, the one ``python -m specviz machine`` prints c from (its rates and defaults left out here)."""
    from specviz.analysis import defaults
    from specviz.models import rates

    dirs, pair = onednn
    monkeypatch.setattr(
        defaults, "measure_pair_defaults", lambda *args, **kwargs: draft_replay.MeasuredDefaults("", 1, "")
    )
    monkeypatch.setattr(rates, "machine_rates", lambda: MachineRates(40.0, {"float32": 500.0}))
    args = ["machine", "--target", dirs["target"], "--draft", dirs["draft"], "--drafter", "model", "--device", "cpu"]
    assert main(args) == 0
    exiting = config_for(dirs, confidence_exit=0.8)
    assert roofline.draft_profile(exiting, pair) is roofline.draft_profile(config_for(dirs), pair)
    trace = speculative_decode(exiting, prompt_ids=PROMPT, pair=pair)
    assert f"c = {metrics.machine_speedup(trace, pair)[0]:.3f} " in capsys.readouterr().out


def test_the_oracle_drafts_with_the_targets_own_profile(onednn):
    dirs, pair = onednn
    oracle = roofline.draft_profile(config_for(dirs, drafter="oracle"), pair)
    assert oracle is pass_profile(pair.target, full_forward) and oracle.forward == "full"


def test_the_default_precision_is_exact_where_float32_speculation_pays():
    flat, rising = profile_of((20.0,) * 9), profile_of(tuple(20.0 * n for n in range(1, 10)))
    cheap_draft, bf16_flat = profile_of((2.0,) * 9), profile_of((10.0,) * 9)
    chosen = draft_replay.measured_defaults({"float32": (flat, cheap_draft), "bfloat16": (bf16_flat, cheap_draft)}, 0.6)
    assert chosen.dtype == "float32" and chosen.gamma == roofline.best_predicted_gamma(0.6, 0.1, flat)
    assert "float32 pays" in chosen.reason and "α = 0.60" in chosen.reason
    # float32 on a kernel whose pass over k + 1 tokens costs k + 1 steps: speculation cannot pay in it
    slow = draft_replay.measured_defaults({"float32": (rising, cheap_draft), "bfloat16": (bf16_flat, cheap_draft)}, 0.6)
    assert slow.dtype == "bfloat16" and "lossless only up to rounding" in slow.reason


def replay_of(agreed: str, confidence: str = "") -> draft_replay.DraftReplay:
    """A one-continuation replay: ``agreed`` as 1/0 per position, ``confidence`` as digits d for max q = d / 10
    (every position 0.9 where not given)."""
    sure = confidence or "9" * len(agreed)
    return draft_replay.DraftReplay((tuple(a == "1" for a in agreed),), (tuple(int(d) / 10 for d in sure),))


def test_greedy_rounds_replay_along_the_targets_text_as_the_engine_plays_them():
    # γ 3 on 8 positions: draft 3, accept 2, emit the correction (3 tokens); draft 3, all accepted, bonus (4); the
    # last position is the final round's own token (nothing left to draft)
    assert draft_replay.replayed_rounds([1, 1, 0, 1, 1, 1, 1, 0], [0.9] * 8, 3, 0.0) == [(3, 3), (3, 4), (0, 1)]
    # a confidence exit stops drafting after the first unsure position (that one still drafted)
    assert draft_replay.replayed_rounds([1, 1, 1, 1, 1], [0.9, 0.5, 0.9, 0.9, 0.9], 4, 0.8) == [(2, 3), (1, 2)]
    # the rounds never draft past the continuation: every token is emitted once
    for gamma in range(1, 9):
        rounds = draft_replay.replayed_rounds([1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0], [0.9] * 11, gamma, 0.0)
        assert sum(emitted for _, emitted in rounds) == 11 and all(d <= gamma for d, _ in rounds)


def test_a_replay_of_independent_acceptance_predicts_what_theorem_3_8_does():
    """With acceptance i.i.d. at α and full blocks, the replayed speedup converges to Thm. 3.8's at v(k)."""
    generator = torch.Generator().manual_seed(0)
    alpha, gamma, c = 0.7, 4, 0.1
    agreed = (torch.rand(200_000, generator=generator) < alpha).tolist()
    replay = draft_replay.DraftReplay((tuple(agreed),), ((0.9,) * len(agreed),))
    target, draft = profile_of(tuple(20.0 + n for n in range(9))), profile_of((20.0 * c,) * 9)
    replayed = draft_replay.replayed_speedup(replay, gamma, 0.0, target, draft)
    assert replayed == pytest.approx(expected_speedup(alpha, gamma, c, target.verify_cost(gamma)), rel=0.01)
    assert replay.alpha == pytest.approx(alpha, abs=0.005)


def test_the_engines_own_costs_per_token_shorten_the_rounds_that_pay():
    """A round costs its passes plus the engine's work on each drafted token and verified position; where drafting a
    token costs more than its pass, shorter blocks pay (the replay predicts what the engine spends, not only the
    models' passes)."""
    target, draft = profile_of(tuple(20.0 + n for n in range(9))), profile_of((2.0,) * 9)
    spent = draft_replay.RoundOverheads(drafted_ms=3.0, position_ms=0.5)
    assert draft_replay.round_ms(4, target, draft, spent) == 4 * (2.0 + 3.0) + 24.0 + 5 * 0.5
    replay = replay_of(
        "".join("1" if x < 0.8 else "0" for x in torch.rand(400, generator=torch.Generator().manual_seed(1)))
    )
    free = draft_replay.replayed_draft(replay, target, draft, exits=(0.0,))
    costly = draft_replay.replayed_draft(replay, target, draft, spent, exits=(0.0,))
    assert costly[0] < free[0] and costly[2] < free[2]


def test_the_fastest_draft_is_the_one_whose_replayed_rounds_are_fastest():
    target = profile_of((20.0,) * 9)
    exact, int8 = profile_of((6.0,) * 9), profile_of((1.5,) * 9)
    profiles = {("float32", "float32"): (target, exact), ("float32", "int8"): (target, int8)}
    agreeing = replay_of("1111011110" * 6)
    cheaper = draft_replay.fastest_drafts(profiles, {"float32": agreeing, "int8": agreeing})["float32"]
    assert cheaper.draft_dtype == "int8"
    gamma, exit_at, speedup = draft_replay.replayed_draft(agreeing, target, int8)
    assert (cheaper.gamma, cheaper.confidence_exit, cheaper.speedup) == (gamma, exit_at, speedup)
    assert cheaper.tokens_per_s == pytest.approx(speedup * 1000 / 20.0)
    # a draft that became cheap by losing most of its acceptance does not pay: the float32 draft wins
    worse = draft_replay.fastest_drafts(profiles, {"float32": agreeing, "int8": replay_of("1000" * 15)})
    assert worse["float32"].draft_dtype == "float32"


def test_a_confidence_exit_is_chosen_where_the_draft_knows_when_it_is_wrong():
    """A draft whose every disagreement comes at low confidence: stopping there saves the rounds' wasted draft steps
    and rows, so a confidence exit pays; the same draft, sure of its wrong tokens, gets none."""
    target, draft = profile_of(tuple(20.0 * (1 + 0.1 * n) for n in range(9))), profile_of((5.0,) * 9)
    agreed = "".join("1" if x < 0.75 else "0" for x in torch.rand(400, generator=torch.Generator().manual_seed(0)))
    knows = replay_of(agreed, agreed.replace("0", "4").replace("1", "9"))
    _, exit_at, speedup = draft_replay.replayed_draft(knows, target, draft)
    assert exit_at > 0 and speedup > draft_replay.replayed_draft(knows, target, draft, exits=(0.0,))[2]
    assert draft_replay.replayed_draft(replay_of(agreed), target, draft)[1] == 0.0


def test_fastest_decodes_on_the_measured_choice_and_the_trace_records_it(
    onednn, tmp_path, monkeypatch, capsys, profiled_cache
):
    from specviz.analysis import defaults

    monkeypatch.setattr(PassProfile, "quiet", True)  # a busy test machine's profiles count as quiet here
    dirs, _ = onednn
    out = tmp_path / "trace.json"
    args = ["trace", "--target", dirs["target"], "--draft", dirs["draft"], "--drafter", "ngram", "--fastest"]
    assert main([*args, "--prompt-ids", ",".join(map(str, PROMPT)), "--device", "cpu", "--out", str(out)]) == 0
    chosen = defaults.stored_defaults(dirs["target"], dirs["draft"], "cpu").fastest["float32"]
    recorded = json.loads(out.read_text())["config"]
    assert (recorded["drafter"], recorded["draft_dtype"], recorded["gamma"]) == ("model", *chosen[:2])
    assert recorded["confidence_exit"] == chosen.confidence_exit in roofline.EXITS
    assert f"the draft model in {chosen.draft_dtype} at γ = {chosen.gamma}" in capsys.readouterr().err


def test_fastest_among_target_precisions_picks_the_one_predicted_fastest_and_records_it(
    onednn, tmp_path, monkeypatch, capsys, profiled_cache
):
    """``--fastest int8,int4``: of the target precisions the user allows, the one whose configuration is predicted at
    the most tokens a second on this machine; the trace records the target's precision, the draft's and γ chosen."""
    from specviz.analysis import defaults

    monkeypatch.setattr(PassProfile, "quiet", True)  # a busy test machine's profiles count as quiet here
    dirs, _ = onednn
    out = tmp_path / "trace.json"
    args = ["trace", "--target", dirs["target"], "--draft", dirs["draft"], "--fastest", "int8,int4"]
    assert main([*args, "--prompt-ids", ",".join(map(str, PROMPT)), "--device", "cpu", "--out", str(out)]) == 0
    fastest = defaults.stored_defaults(dirs["target"], dirs["draft"], "cpu").fastest
    dtype = max(("int8", "int4"), key=lambda d: (fastest[d].pays, fastest[d].tokens_per_s))  # one that pays first
    recorded = json.loads(out.read_text())["config"]
    assert (recorded["dtype"], recorded["draft_dtype"], recorded["gamma"]) == (dtype, *fastest[dtype][:2])
    assert recorded["confidence_exit"] == fastest[dtype].confidence_exit
    said = capsys.readouterr().err
    if fastest[dtype].pays:
        assert f"an {dtype} target (the fastest of int8, int4)" in said
        assert f"{fastest[dtype].tokens_per_s:.1f} tokens/s" in said
    else:  # a tiny pair on a busy machine: no draft beats its target alone
        assert f"No draft pays for an {dtype} target on this machine: the closest, the draft model in" in said
    assert main([*args[:-1], "int3", "--prompt-ids", "1,2", "--device", "cpu", "--out", str(out)]) != 0
    assert "--fastest knows targets in" in capsys.readouterr().err


def test_a_lessons_draft_never_loses_while_one_with_a_confidence_exit_pays():
    """The lesson drafts γ tokens a round (no exit) where that pays; where it loses to the target alone and a confidence
    exit pays in the same precision (a GPU whose draft step costs a third of the target's), the exit is the default;
    where nothing pays, the closest stands (and is said: :func:`~specviz.analysis.claims.loses_words`)."""
    from specviz.analysis.defaults import lesson_draft

    paying, losing = (
        draft_replay.FastestDraft("float32", 4, 1.3, 60.0, 0.0),
        draft_replay.FastestDraft("float32", 2, 0.8, 40.0, 0.0),
    )
    exiting = draft_replay.FastestDraft("float32", 5, 1.1, 55.0, 0.9)
    assert lesson_draft(paying, exiting) == paying
    assert lesson_draft(losing, exiting) == exiting
    closer = exiting._replace(speedup=0.9)
    assert lesson_draft(losing, closer) == losing and not losing.pays and paying.pays


def test_fastest_where_no_draft_pays_names_the_closest_and_prefers_a_precision_that_pays():
    """``--fastest`` never chooses a losing configuration while another allowed one pays, even one predicted at more
    tokens a second; where none pays it says so, names the closest and runs no speculative lane."""
    from specviz.analysis.defaults import fastest_choice
    from specviz.analysis.replay import FastestDraft, MeasuredDefaults

    fastest = {
        "float32": FastestDraft("bfloat16", 5, 0.64, 30.0, 0.9),
        "bfloat16": FastestDraft("bfloat16", 3, 0.97, 80.0, 0.0),
        "int8": FastestDraft("int8", 4, 1.1, 50.0, 0.0),
    }
    measured = MeasuredDefaults("float32", 5, "measured", "bfloat16", fastest)
    config = DecodeConfig(target="a-target", draft="a-draft", drafter="model")
    among = fastest_choice(config, measured, ("float32", "bfloat16", "int8"))
    assert among.pays and among.config.dtype == "int8" and "an int8 target (the fastest of" in among.words
    alone = fastest_choice(config, measured)
    assert not alone.pays and (alone.config.gamma, alone.config.value("confidence_exit")) == (5, 0.9)
    assert alone.words.startswith("--fastest: No draft pays for a float32 target on this machine: the closest, ")
    assert "the draft model in bfloat16 at γ = 5, stopping below max q = 0.9, replays at 0.64×" in alone.words
    assert not fastest_choice(config, measured, ("float32", "bfloat16")).pays
    busy = fastest_choice(config, dataclasses.replace(measured, busy=True))  # a busy replay states no figure
    assert not busy.pays and "No draft pays" not in busy.words and "0.64" not in busy.words
    assert "chosen from passes measured while other work held the cores" in busy.words


def test_race_fastest_where_no_draft_pays_races_the_target_alone(onednn, tmp_path, monkeypatch, capsys, profiled_cache):
    """``python -m specviz race --fastest`` on a pair whose stored replay finds no paying draft here (as a GPU's may):
    the command says so and the JSON holds the target alone, measured, and no speculative lane."""
    from specviz.analysis import defaults
    from specviz.analysis.draft_precision import precisions_on
    from specviz.analysis.replay import FastestDraft, MeasuredDefaults

    dirs, pair = onednn
    losing = {dtype: FastestDraft(dtype, 2, 0.7, 10.0, 0.0) for dtype in precisions_on("cpu", defaults.PRECISIONS)}
    defaults.store_defaults(
        dirs["target"], dirs["draft"], "cpu", MeasuredDefaults("float32", 2, "stored", None, losing)
    )
    out = tmp_path / "race.json"
    args = ["race", "--target", dirs["target"], "--draft", dirs["draft"], "--fastest", "--max-new-tokens", "6"]
    assert main([*args, "--prompt-ids", ",".join(map(str, PROMPT)), "--device", "cpu", "--out", str(out)]) == 0
    raced = json.loads(out.read_text())
    assert raced["speculative"] is None and len(raced["target_alone"]["output_ids"]) == 6
    assert raced["target_alone"]["output_ids"] == target_greedy(pair.target, PROMPT, 6)  # the target's own text
    said = capsys.readouterr().err
    assert "No draft pays for a float32 target on this machine" in said and "Only the target alone runs." in said


def test_no_speed_page_guesses_from_the_cpus_dispatch_level():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sources = list(root.joinpath("specviz").rglob("*.py"))
    guesses = [path.name for path in sources if "cpu_matrix_units" in path.read_text(encoding="utf-8")]
    assert guesses == []  # the speed sentence is the measured profile's (roofline.speed_sentence)


def test_a_pairs_defaults_are_measured_once_and_kept_for_this_machine_only(onednn, monkeypatch, profiled_cache):
    from specviz.analysis import defaults

    monkeypatch.setattr(PassProfile, "quiet", True)  # a busy test machine's profiles count as quiet here
    dirs, _ = onednn
    assert defaults.stored_defaults(dirs["target"], dirs["draft"], "cpu") is None
    measured = defaults.measure_pair_defaults(config_for(dirs))
    assert measured.dtype in defaults.PRECISIONS and 1 <= measured.gamma <= PROFILE_TOKENS - 1
    assert "greedy acceptance on held-out prompts, α = " in measured.reason  # measured: no manifest for this pair
    assert defaults.stored_defaults(dirs["target"], dirs["draft"], "cpu") == measured
    assert set(measured.fastest) == set(defaults.PRECISIONS)  # the fastest draft for each target precision
    assert measured.draft_dtype in ("float32", "bfloat16", "int8", "int4")  # the lesson's: γ tokens a round
    assert all(fastest.confidence_exit in roofline.EXITS for fastest in measured.fastest.values())
    assert "The lesson's draft here" in measured.reason and 1 <= measured.gamma <= PROFILE_TOKENS - 1
    assert defaults.stored_defaults(dirs["target"], dirs["draft"], "cuda") is None  # another device, another record
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert defaults.stored_defaults(dirs["target"], dirs["draft"], "cpu") is None  # another torch, measured again


def test_the_app_measures_the_lesson_precisions_and_fastest_adds_the_quantised_ones(
    onednn, monkeypatch, profiled_cache
):
    """A first app start measures what it opens on (float32 and bfloat16 targets); ``--fastest`` among the quantised
    targets finds them missing and measures every precision."""
    from specviz.analysis import defaults
    from specviz.analysis.draft_precision import precisions_on

    monkeypatch.setattr(PassProfile, "quiet", True)  # a busy test machine's profiles count as quiet here
    dirs, _ = onednn
    config = config_for(dirs)
    opened = defaults.defaults_once(config)
    assert set(opened.fastest) == set(precisions_on("cpu", defaults.LESSON_PRECISIONS))
    assert defaults.defaults_once(config) == opened  # stored: read, not measured again
    widened = defaults.defaults_once(config, targets=defaults.PRECISIONS)
    assert set(widened.fastest) == set(precisions_on("cpu", defaults.PRECISIONS))
    assert defaults.stored_defaults(dirs["target"], dirs["draft"], "cpu") == widened


def test_defaults_chosen_from_busy_profiles_say_so_and_a_later_start_measures_them_again(
    onednn, monkeypatch, profiled_cache
):
    """A first start on a loaded machine stores its choice marked busy (replicas open a link alike), with words saying
    no figure is stated from it; a start within the hour reads it (measuring again per process fed the load); one an
    hour later measures again, and a quiet machine's choice is stored unmarked. A busy measurement never replaces
    it."""
    from specviz.analysis import defaults

    monkeypatch.setattr(PassProfile, "quiet", False)
    dirs, _ = onednn
    config = config_for(dirs)
    busy = defaults.defaults_once(config)
    assert busy.busy and "no figure is stated from it" in busy.reason
    path = defaults.defaults_file(config.target, config.draft, config.device)
    assert not defaults.due_for_remeasure(path, busy)  # within the hour: read
    assert defaults.defaults_once(config) == busy
    monkeypatch.setattr(PassProfile, "quiet", True)
    hour_ago = path.stat().st_mtime - defaults.MEASURE_BUSY_AGAIN_S
    os.utime(path, (hour_ago, hour_ago))
    assert defaults.due_for_remeasure(path, busy)
    quiet = defaults.defaults_once(config)
    assert not quiet.busy and "other work" not in quiet.reason
    assert defaults.stored_defaults(config.target, config.draft, config.device) == quiet
    assert not defaults.keep_defaults(config, busy)  # a class's busy hour never replaces the quiet choice
    assert defaults.stored_defaults(config.target, config.draft, config.device) == quiet


def test_the_drafts_replay_reads_its_greedy_tokens_and_confidence_along_the_targets_text(onednn):
    """Agreement and confidence over the target's greedy text, the draft fed the target's tokens: one pass a prompt,
    checked here against the draft's own softmax after each prefix, one transformers forward each."""
    from specviz.analysis import defaults
    from specviz.engine import load_pair

    dirs, _ = onednn
    config = config_for(dirs, draft_vocab=0)
    pair = load_pair(config)
    continuations = defaults.target_continuations(config, pair)
    assert len(continuations) == 2 * defaults.ACCEPTANCE_PROMPTS
    agreed, confidence = [], []
    for prompt, continuation in continuations:
        for t, token in enumerate(continuation):
            ids = torch.tensor([prompt + continuation[:t]])
            with torch.inference_mode():
                q = torch.softmax(pair.draft.model(ids).logits[0, -1].float(), -1)
            agreed.append(int(q.argmax()) == token)
            confidence.append(float(q.max()))
    replay = defaults.draft_replay(config, pair.draft, continuations)
    assert [a for one in replay.agreed for a in one] == agreed
    assert [c for one in replay.confidence for c in one] == pytest.approx(confidence, abs=1e-5)
    assert replay.alpha == sum(agreed) / len(agreed) and 0 < replay.alpha < 1  # a noisy copy: agrees often, not always
    assert defaults.draft_replay(config, pair.target, continuations).alpha == 1.0  # the target drafting for itself


def test_an_unreadable_defaults_file_is_measured_again(tmp_path, monkeypatch):
    from specviz.analysis import defaults

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    path = defaults.defaults_file("a", "b", "cpu")
    path.parent.mkdir(parents=True)
    path.write_text("{not json", encoding="utf-8")
    assert defaults.stored_defaults("a", "b", "cpu") is None
    defaults.store_defaults("a", "b", "cpu", draft_replay.MeasuredDefaults("bfloat16", 5, "why"))
    assert defaults.stored_defaults("a", "b", "cpu") == draft_replay.MeasuredDefaults("bfloat16", 5, "why")


def test_replicas_starting_together_agree_on_one_measured_choice(onednn, tmp_path, monkeypatch):
    """A second process waits while the first measures, then reads the first one's stored choice."""
    import fcntl
    import threading

    from specviz.analysis import defaults

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    dirs, _ = onednn
    config = config_for(dirs)
    path = defaults.defaults_file(config.target, config.draft, config.device)
    path.parent.mkdir(parents=True)
    fastest = {dtype: ("int4", 7, 1.5, 10.0, 0.8) for dtype in defaults.LESSON_PRECISIONS}  # a measurement's
    chosen = draft_replay.MeasuredDefaults("bfloat16", 7, "the first replica's measurement", fastest=fastest)
    got = []
    with open(path.with_suffix(".lock"), "w") as first:  # the first replica is measuring
        fcntl.flock(first, fcntl.LOCK_EX)
        second = threading.Thread(target=lambda: got.append(defaults.defaults_once(config)))
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive() and not got  # it waits instead of measuring too
        defaults.store_defaults(config.target, config.draft, config.device, chosen)
    second.join()
    assert got == [chosen]


def test_a_timed_pass_is_timed_to_its_end_on_the_device(tiny_pair, monkeypatch):
    """On a GPU a pass returns to the host once its kernels are queued; the profile, c and the timed passes read the
    clock after the device ran them. A fake device whose queue takes 20 ms to run after each wait asked of it: every
    timed pass includes those 20 ms, and each is waited for before its clock starts and after it."""
    from specviz.analysis import cost

    waits = []

    def queued_device(device: torch.device) -> None:  # a device that runs its queue 20 ms after being asked
        waits.append(device)
        time.sleep(0.02)

    monkeypatch.setattr(pass_timing, "device_wait", queued_device)
    timed = pass_timing.time_passes(tiny_pair.target, full_forward, [3, 7, 5, 9] * 35, rounds=1)
    assert min(timed.pass_ms) >= 20.0 and len(waits) == 2 * 2 * pass_timing.PROFILE_TOKENS  # warm-up and one round
    monkeypatch.setattr(cost, "device_wait", queued_device)
    assert cost.cached_pass_ms(tiny_pair.target, full_forward, [3, 7, 5, 9] * 4, repeats=1) >= 20.0


def test_the_bandwidth_probe_reads_the_int4_kernels_own_stream(monkeypatch):
    """#71: the roofline's bandwidth is the fastest of the float32 streams and one row through an int4 matrix (a
    quantised step's stream, which the float32 probes understate on some CPUs); the int4 probe runs here."""
    from specviz.models import rates

    assert rates.int4_stream_gbs(8, 1) > 0  # the kernels are built in this checkout's tests
    monkeypatch.setattr(rates, "int4_stream_gbs", lambda megabytes, repeats: 1e6)  # faster than any float32 stream
    assert rates.measure_rates(megabytes=8, repeats=1).bandwidth_gbs == 1e6
