"""Parallel drafters (blockwise heads, mask-query): lossless under every rule, one pass, trainable."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specviz.analysis.lab import chi_square_power, goodness_of_fit
from specviz.config import DecodeConfig
from specviz.drafters.parallel_heads import default_weights, load_drafter, save_drafter
from specviz.engine import ModelPair, eos_ids, speculative_decode
from specviz.registry.drafters import DRAFTERS
from specviz.registry.rules import GREEDY, RULES, SAMPLING
from specviz.rules.distributions import softmax32
from specviz.settings import ConfigError
from specviz.training.parallel_drafters import generate_corpus, train_drafter

from .conftest import target_greedy

TINY_PROMPTS = [" ".join(f"w{(3 * i + j) % 30}" for j in range(6)) for i in range(12)]
PROMPT = [int(w[1:]) + 2 for w in TINY_PROMPTS[0].split()]  # ids of a training prompt (w_i has id i + 2)


@pytest.fixture(scope="module")
def tiny_weights(tiny_pair, tmp_path_factory):
    """Both drafters trained briefly on the tiny target's own greedy text (a real, small training run)."""
    root = tmp_path_factory.mktemp("parallel")
    corpus = generate_corpus(tiny_pair.target, TINY_PROMPTS, 24, progress=False)
    paths, curves = {}, {}
    for kind in ("blockwise", "maskquery"):
        module, meta, losses = train_drafter(
            kind, tiny_pair.target, corpus, k=3, window=8, steps=200, batch_size=16, lr=3e-3, seed=0, progress=False
        )
        paths[kind] = root / f"{kind}.safetensors"
        save_drafter(module, meta, paths[kind])
        curves[kind] = losses
    return paths, curves


def parallel_config(tiny_dirs, path, kind, **changes) -> DecodeConfig:
    return DecodeConfig(
        target=tiny_dirs["target"],
        drafter=kind,
        parallel_weights=str(path),
        rule="greedy",
        max_new_tokens=24,
        device="cpu",
    ).replace(**changes)


@pytest.mark.parametrize("kind", ["blockwise", "maskquery"])
def test_training_lowers_the_loss(tiny_weights, kind):
    losses = tiny_weights[1][kind]
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])


def test_training_examples_cover_the_generated_region_only(tiny_pair):
    from specviz.training.parallel_drafters import Corpus, make_batch, training_examples

    corpus = Corpus(sequences=[list(range(2, 14))], prompt_lens=[5])
    examples = training_examples(corpus, k=3)
    assert examples == [(0, j) for j in range(3, 8)]  # pending token j+1 >= the prompt's last; j+4 in range
    states = [torch.arange(12.0)[:, None].expand(12, 4)]
    memory, pending, teacher = make_batch([(0, 3)], corpus, states, 3, window=6)
    assert memory[0, :, 0].tolist() == [0, 0, 0, 1, 2, 3]  # left-padded window ending at j = 3
    assert pending.tolist() == [corpus.sequences[0][4]]
    assert teacher[0, :, 0].tolist() == [4, 5, 6]  # the target's states whose logits give tokens j+2..j+4


@pytest.mark.parametrize("kind", ["blockwise", "maskquery"])
def test_greedy_is_exact_and_drafts_in_one_pass(tiny_dirs, tiny_pair, tiny_weights, kind):
    trace = speculative_decode(
        parallel_config(tiny_dirs, tiny_weights[0][kind], kind), prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target)
    )
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)
    assert trace.rounds[0].draft == []  # no target states before the first verification
    drafting = [r for r in trace.rounds[1:] if r.draft]
    assert drafting and all(r.draft_forward_passes == 1 for r in drafting)  # k tokens, one drafter pass
    assert trace.stats.accepted_tokens > 0


@pytest.mark.parametrize("kind", ["blockwise", "maskquery"])
def test_top_beta_one_is_greedy(tiny_dirs, tiny_pair, tiny_weights, kind):
    config = parallel_config(tiny_dirs, tiny_weights[0][kind], kind, rule="topbeta", beta=1, tau=100.0)
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target))
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)


def joint_law_of_two_tokens(target, prompt: list[int]) -> torch.Tensor:
    """P(t1 = a, t2 = b) = p(a | prompt) p(b | prompt, a), flattened to index a * V + b.

    An end-of-sequence first token ends the output: its row holds p(eos) in column 0 (see ``cell``).
    """
    with torch.inference_mode():
        p1 = softmax32(target.model(torch.tensor([prompt])).logits[0, -1])
        p2 = softmax32(target.model(torch.tensor([prompt + [a] for a in range(len(p1))])).logits[:, -1])
        for eos in eos_ids(target):
            p2[eos] = 0.0
            p2[eos, 0] = 1.0
        return (p1[:, None] * p2).reshape(-1)


def cell(output_ids: list[int], vocab: int) -> int:
    """The joint law's index of an output's first two tokens (column 0 when the first one ended it)."""
    return output_ids[0] * vocab + (output_ids[1] if len(output_ids) > 1 else 0)


@pytest.mark.slow  # a statistical test at its computed power: many samples
@pytest.mark.parametrize("kind", ["blockwise", "maskquery"])
def test_speculative_sampling_with_a_parallel_draft_is_lossless(tiny_dirs, tiny_pair, tiny_weights, kind):
    """The second token is the first one a parallel draft proposes: test the joint law of tokens 1 and 2."""
    n = 500  # the power check below: the context-blind alternative is caught with certainty at this n
    joint = joint_law_of_two_tokens(tiny_pair.target, PROMPT)
    vocab = int(len(joint) ** 0.5)
    # power: a second token drawn ignoring the first (a broken cache or position) would be caught
    ignoring_first = (
        joint.reshape(vocab, vocab).sum(1)[:, None] * joint.reshape(vocab, vocab).sum(0)[None, :]
    ).reshape(-1)
    assert chi_square_power(joint, ignoring_first, n, level=1e-3) > 0.999
    config = parallel_config(tiny_dirs, tiny_weights[0][kind], kind, rule="sample", max_new_tokens=3)
    pair = ModelPair(tiny_pair.target)
    traces = [speculative_decode(config.replace(seed=s), prompt_ids=PROMPT, pair=pair) for s in range(n)]
    cells = [cell(t.output_ids, vocab) for t in traces]
    assert goodness_of_fit(cells, joint) > 1e-3
    assert goodness_of_fit(cells, ignoring_first) < 1e-3
    assert sum(len(r.draft) for t in traces for r in t.rounds) > n // 2  # the parallel draft really proposed tokens


def test_weights_round_trip_and_mismatch_errors(tiny_dirs, tiny_pair, tiny_weights, tmp_path):
    path = tiny_weights[0]["maskquery"]
    module, meta = load_drafter(str(path))
    assert meta.kind == "maskquery" and meta.k == 3 and meta.window == 8 and meta.steps == 200
    again = tmp_path / "again.safetensors"
    save_drafter(module, meta, again)
    reloaded, _ = load_drafter(str(again))
    for (name, a), (_, b) in zip(module.state_dict().items(), reloaded.state_dict().items()):
        assert torch.equal(a.half(), b.half()), name
    with pytest.raises(ConfigError, match="No trained"):
        speculative_decode(
            parallel_config(tiny_dirs, tmp_path / "missing.safetensors", "blockwise"),
            prompt_ids=PROMPT,
            pair=ModelPair(tiny_pair.target),
        )
    with pytest.raises(ConfigError, match="maskquery drafter"):  # a mask-query file named as blockwise weights
        speculative_decode(
            parallel_config(tiny_dirs, path, "blockwise"), prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target)
        )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["blockwise", "maskquery"])
def test_shipped_weights_fit_the_embedded_model_and_stay_exact(embedded, kind):
    module, meta = load_drafter(str(default_weights(kind)))
    assert meta.target == "embedded" and meta.hidden == embedded.model.config.hidden_size and meta.k == 4
    assert default_weights(kind).stat().st_size < 8e6  # small files, shipped in the repo
    config = DecodeConfig(drafter=kind, max_new_tokens=24, device="cpu")
    trace = speculative_decode(
        config, prompt="Explain speculative decoding to a student in three sentences.", pair=ModelPair(embedded)
    )
    assert trace.output_ids == target_greedy(embedded, trace.prompt_ids, 24)
    assert trace.stats.accepted_tokens > 0  # the trained drafter guesses some tokens right


@pytest.mark.slow
def test_compare_drafters_on_the_embedded_model(embedded):
    from specviz.analysis.drafters import compare_drafters

    config = DecodeConfig(max_new_tokens=12, gamma=4, device="cpu")
    pair = ModelPair(embedded)
    prompts = [[1, 9690, 198, 2683, 359, 253], [1, 4093, 198, 26843, 2, 198]]
    summary, by_position, calibration = compare_drafters(config, pair, prompts, ["blockwise", "maskquery", "layerskip"])
    assert list(summary.drafter) == [DRAFTERS[k].label for k in ("blockwise", "maskquery", "layerskip")]
    assert (summary.draft_passes_per_round.iloc[:2] == 1).all()  # parallel: one pass per drafting round
    assert summary.draft_passes_per_round.iloc[2] > 1  # autoregressive self-draft: one pass per token
    for _, rows in by_position.groupby("drafter"):
        verified = rows.sort_values("position").verified.tolist()
        assert verified == sorted(verified, reverse=True)  # position i+1 is checked only after i was accepted
        assert ((rows.acceptance_rate >= 0) & (rows.acceptance_rate <= 1)).all()


@pytest.mark.parametrize("kind", ["blockwise", "maskquery"])
def test_rule_comparison_recomputes_the_parallel_drafts_q(tiny_dirs, tiny_pair, tiny_weights, kind):
    """The Compare-rules page scores a parallel draft with fresh passes: same q and verdicts as the engine."""
    from specviz.analysis.cost import cost_ratio
    from specviz.analysis.rules import compare_rules_on_draft

    config = parallel_config(tiny_dirs, tiny_weights[0][kind], kind, rule="sample", seed=4)
    pair = ModelPair(tiny_pair.target)
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=pair)
    rnd = next(r for r in trace.rounds if r.draft)
    prefix = trace.prompt_ids + trace.output_ids[: rnd.prefix_len - len(PROMPT)]
    table = compare_rules_on_draft(config.replace(rule="greedy"), pair, prefix, [p.token_id for p in rnd.draft])
    greedy_engine = speculative_decode(config.replace(rule="greedy"), prompt_ids=PROMPT, pair=pair)
    assert set(table.rule) >= {RULES[GREEDY].label, RULES[SAMPLING].label}
    sampled = table[table.rule == RULES[SAMPLING].label]
    first = rnd.draft[0]
    assert sampled.accept_prob.iloc[0] == pytest.approx(min(1.0, first.p / first.q), rel=1e-4)
    assert 0 < cost_ratio(config, pair, PROMPT, repeats=2) < 10
    assert greedy_engine.stats.new_tokens == 24
