"""EAGLE: a head on the target's features drafts chains and EAGLE-2 trees; greedy stays exact, sampling lossless."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
import torch

from specviz.analysis.lab import chi_square_power, goodness_of_fit
from specviz.config import DecodeConfig
from specviz.drafters import eagle
from specviz.drafters.base import DraftTree, TreeNode
from specviz.drafters.eagle import reranked
from specviz.drafters.eagle_head import EagleShape, load_head, save_head
from specviz.drafters.modules import drafter_settings
from specviz.engine import ModelPair, eos_ids, speculative_decode
from specviz.rules.distributions import softmax32
from specviz.runtime.protocol import KVCachedSequence
from specviz.settings import ConfigError
from specviz.training.eagle import EagleSettings, train_head
from specviz.training.eagle_text import batch_sequences, sequence_features
from specviz.training.teacher_text import generate_teacher_text

from .conftest import target_greedy

pytestmark = [pytest.mark.slow]

TINY_PROMPTS = [" ".join(f"w{(5 * i + 3 * j) % 30}" for j in range(6)) for i in range(24)]
PROMPT = [int(w[1:]) + 2 for w in TINY_PROMPTS[0].split()]  # ids of a training prompt (w_i has id i + 2)


@pytest.fixture(scope="module")
def tiny_head(tiny_pair, tmp_path_factory):
    """A head trained briefly on the tiny target's own greedy text, through the real pipeline (text, features,
    training, saving): (path, loss curve)."""
    target = tiny_pair.target
    batches = generate_teacher_text(
        target, TINY_PROMPTS, new_tokens=24, temperatures=[0.0], seed=0, top_k=8, batch_size=8, progress=False
    )
    sequences = [s for b in batches for s in batch_sequences(b)]
    features = sequence_features(target, sequences, progress=False)
    config = target.model.config
    shape = EagleShape.of_target(target, draft_vocab=0)
    settings = EagleSettings(steps=150, rows_per_step=8, lr=3e-3, warmup=10, kl_weight=1.0, noise=0.05, draft_vocab=0)
    head, losses = train_head(
        target, sequences, features, shape, torch.arange(config.vocab_size), settings, progress=False
    )
    path = tmp_path_factory.mktemp("eagle") / "head.safetensors"
    save_head(head, torch.arange(config.vocab_size), {"test": True}, path)
    load_head.cache_clear()
    return path, losses


def eagle_config(tiny_dirs, path, **changes) -> DecodeConfig:
    return DecodeConfig(
        target=tiny_dirs["target"],
        drafter="eagle",
        parallel_weights=str(path),
        rule="greedy",
        max_new_tokens=24,
        device="cpu",
    ).replace(**changes)


def test_training_lowers_both_losses(tiny_head):
    losses = tiny_head[1]
    for part in ("regression", "kl"):
        assert statistics.mean(x[part] for x in losses[-10:]) < 0.9 * statistics.mean(x[part] for x in losses[:10])


@pytest.mark.parametrize(
    "changes",
    [
        dict(gamma=1),
        dict(gamma=3),
        dict(gamma=6),
        dict(eagle_tree=True, tree_depth=2, eagle_top_k=2, eagle_budget=3),
        dict(eagle_tree=True, tree_depth=4, eagle_top_k=3, eagle_budget=10),
    ],
)
def test_greedy_is_the_targets_own_output(tiny_dirs, tiny_pair, tiny_head, changes):
    trace = speculative_decode(
        eagle_config(tiny_dirs, tiny_head[0], **changes), prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target)
    )
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)
    assert trace.rounds[0].draft == [] and trace.rounds[0].tree is None  # no target features before round 1
    assert trace.stats.accepted_tokens > 0  # the trained head is accepted
    if changes.get("eagle_tree"):
        trees = [r.tree for r in trace.rounds[1:] if r.tree]
        assert trees and all(len(t.nodes) - 1 <= changes["eagle_budget"] for t in trees)
        assert max(len(t.nodes) - 1 for t in trees) == changes["eagle_budget"]
    else:  # a chain: one head pass per drafted token
        assert all(r.draft_forward_passes == len(r.draft) <= changes["gamma"] for r in trace.rounds[1:])


def test_features_fed_after_a_rejection_are_the_targets(tiny_dirs, tiny_pair, tiny_head, monkeypatch):
    """Corrupting the target's features the head catches up on changes what it drafts, never the output."""
    config = eagle_config(tiny_dirs, tiny_head[0], gamma=4)
    pair = ModelPair(tiny_pair.target)
    exact = speculative_decode(config, prompt_ids=PROMPT, pair=pair)
    assert any(pos.status == "rejected" for r in exact.rounds for pos in r.draft)  # rejections happen
    catch_up = eagle.EagleDrafter.catch_up

    def corrupted(self, context):
        if self.target_state.states is not None:
            noise = torch.Generator().manual_seed(len(context))
            self.target_state.states = self.target_state.states + 3.0 * torch.randn(
                self.target_state.states.shape, generator=noise
            )
        return catch_up(self, context)

    monkeypatch.setattr(eagle.EagleDrafter, "catch_up", corrupted)
    broken = speculative_decode(config, prompt_ids=PROMPT, pair=pair)
    assert broken.output_ids == exact.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)
    drafts = [[pos.token_id for pos in r.draft] for r in exact.rounds]
    assert drafts != [[pos.token_id for pos in r.draft] for r in broken.rounds]
    assert broken.stats.accepted_tokens < exact.stats.accepted_tokens


def joint_law(target, prompt: list[int], tokens: int) -> torch.Tensor:
    """P(t_1 .. t_m) of the target's own sampling, flattened (index sum t_j V^(m-j)); an EOS ends the output, the
    remaining tokens are then counted as 0 (see ``cell``)."""
    vocab = int(target.model.config.vocab_size)
    law = torch.ones(1)
    prefixes = [[]]
    for _ in range(tokens):
        with torch.no_grad():
            p = softmax32(target.model(torch.tensor([prompt + x for x in prefixes])).logits[:, -1])  # (N, V)
        for row, prefix in enumerate(prefixes):
            if any(t in eos_ids(target) for t in prefix):
                p[row] = 0.0
                p[row, 0] = 1.0
        law = (law[:, None] * p).reshape(-1)
        prefixes = [prefix + [t] for prefix in prefixes for t in range(vocab)]
    return law


def cell(output_ids: list[int], vocab: int, tokens: int) -> int:
    ids = (list(output_ids) + [0] * tokens)[:tokens]
    return sum(t * vocab ** (tokens - 1 - j) for j, t in enumerate(ids))


@pytest.mark.parametrize("changes", [dict(gamma=3), dict(eagle_tree=True, tree_depth=2, eagle_top_k=2, eagle_budget=4)])
def test_speculative_sampling_with_eagle_is_lossless(tiny_dirs, tiny_pair, tiny_head, changes):
    """Round 1 emits token 1; round 2 drafts tokens 2 and 3 (the second on the head's own feature): the joint law of
    the first three tokens is the target's."""
    n = 600
    joint = joint_law(tiny_pair.target, PROMPT, 3)
    vocab = tiny_pair.target.model.config.vocab_size
    cube = joint.reshape(vocab, vocab, vocab)
    pairs = cube.sum(2)  # P(t1, t2)
    third_given_first = cube.sum(1) / cube.sum((1, 2))[:, None].clamp_min(1e-30)  # P(t3 | t1), t2 marginalised
    # the alternative: token 3 drawn blind to token 2 (a head that ignored its own drafted token or feature)
    ignoring_second = (pairs[:, :, None] * third_given_first[:, None, :]).reshape(-1)
    assert chi_square_power(joint, ignoring_second, n, level=1e-3) > 0.99
    config = eagle_config(tiny_dirs, tiny_head[0], rule="sample", max_new_tokens=3, **changes)
    pair = ModelPair(tiny_pair.target)
    traces = [speculative_decode(config.replace(seed=s), prompt_ids=PROMPT, pair=pair) for s in range(n)]
    cells = [cell(t.output_ids, vocab, 3) for t in traces]
    assert goodness_of_fit(cells, joint) > 1e-3
    assert goodness_of_fit(cells, ignoring_second) < 1e-3
    drafted = [r for t in traces for r in t.rounds[1:] if r.drafted_count]
    assert len(drafted) > n // 2 and sum(r.accepted_count for r in drafted) > n // 4  # EAGLE really drafted


def node(index, parent, depth, key, children=()):
    return TreeNode(
        index=index,
        parent=parent,
        depth=depth,
        token_id=index,
        draft_prob=0.5,
        sibling_rank=0,
        children=list(children),
        perturbed=key,
    )


def test_rerank_keeps_the_best_nodes_as_a_tree():
    """EAGLE-2's rerank: the budget's best values, ancestors always in, siblings in draw order, renumbered."""
    grown = DraftTree(
        nodes=[
            node(0, -1, 0, 0.0, (1, 2)),
            node(1, 0, 1, -0.1, (3, 4)),
            node(2, 0, 1, -2.0),
            node(3, 1, 2, -0.3),
            node(4, 1, 2, -1.0),
        ],
        levels=[[1, 2], [3, 4]],
        draft_probs={0: torch.ones(2), 1: torch.ones(2)},
    )
    tree = reranked(grown, 3)
    assert [n.token_id for n in tree.nodes] == [0, 1, 3, 4]  # node 2 (value -2.0) is the one left out
    assert [n.parent for n in tree.nodes] == [-1, 0, 1, 1]
    assert [n.sibling_rank for n in tree.nodes[1:]] == [0, 0, 1]
    assert tree.levels == [[1], [2, 3]] and set(tree.draft_probs) == {0, 1}


def test_weights_round_trip_and_mismatch_errors(tiny_dirs, tiny_pair, tiny_head, tmp_path):
    head, order = load_head(str(tiny_head[0]))
    again = tmp_path / "again.safetensors"
    save_head(head, order, {}, again)
    reloaded, order_again = load_head(str(again))
    assert torch.equal(order, order_again)
    for (name, a), (_, b) in zip(head.state_dict().items(), reloaded.state_dict().items()):
        assert torch.equal(a.half(), b.half()), name
    with pytest.raises(ConfigError, match="No EAGLE head"):
        speculative_decode(
            eagle_config(tiny_dirs, tmp_path / "missing.safetensors"),
            prompt_ids=PROMPT,
            pair=ModelPair(tiny_pair.target),
        )
    wider = dataclasses.replace(head.shape, hidden=head.shape.hidden * 2, target="another model")
    other = tmp_path / "other.safetensors"
    save_head(type(head)(wider), order, {}, other)
    with pytest.raises(ConfigError, match="another model"):
        speculative_decode(eagle_config(tiny_dirs, other), prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target))


def test_the_rule_page_and_cost_hooks_score_a_given_draft(tiny_dirs, tiny_pair, tiny_head):
    from specviz.analysis.cost import cost_ratio
    from specviz.analysis.rules import score_draft

    config = eagle_config(tiny_dirs, tiny_head[0], gamma=3)
    pair = ModelPair(tiny_pair.target)
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=pair)
    second = trace.rounds[1]
    prefix = PROMPT + trace.output_ids[: second.prefix_len - len(PROMPT)]
    draft_ids = [pos.token_id for pos in second.draft]
    _, draft_logits = score_draft(config, pair, prefix, draft_ids)
    assert draft_logits.shape == (len(draft_ids), pair.vocab_size)
    for pos, row in zip(second.draft, draft_logits):  # the q the run drafted from, recomputed
        assert float(softmax32(row)[pos.token_id]) == pytest.approx(pos.q, abs=1e-5)
    assert 0 < cost_ratio(config, pair, PROMPT, repeats=2) < 10


def test_a_fresh_drafter_drafts_nothing_without_the_targets_features(tiny_dirs, tiny_pair, tiny_head):
    own, shared = drafter_settings(eagle_config(tiny_dirs, tiny_head[0]))
    drafter = eagle.build(own, shared, ModelPair(tiny_pair.target), KVCachedSequence())
    from specviz.rules.greedy import GreedyRule

    block = drafter.propose(PROMPT, 3, GreedyRule(), torch.Generator())
    assert block.token_ids == [] and block.forward_passes == 0


def test_calibration_bins_every_verified_drafted_token(tiny_dirs, tiny_pair, tiny_head):
    from specviz.analysis.drafters import CONFIDENCE_BINS, confidence_calibration

    config = eagle_config(tiny_dirs, tiny_head[0], gamma=4, rule="sample", temperature=1.0)
    traces = [
        speculative_decode(config.replace(seed=s), prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target))
        for s in range(4)
    ]
    table = confidence_calibration(traces)
    verified = [pos for t in traces for r in t.rounds for pos in r.draft if pos.status != "not_verified"]
    assert table.verified.sum() == len(verified) > 0
    assert table.acceptance_rate.between(0, 1).all()
    for _, row in table.iterrows():
        assert row.bin / CONFIDENCE_BINS <= row.confidence <= (row.bin + 1) / CONFIDENCE_BINS
    accepted = sum(pos.accepted for pos in verified)
    assert (table.acceptance_rate * table.verified).sum() == pytest.approx(accepted)


def test_the_round_view_says_what_eagle_drafted_from(tiny_dirs, tiny_pair, tiny_head):
    from specviz.presentation.render import drafted_from_html

    trace = speculative_decode(
        eagle_config(tiny_dirs, tiny_head[0], gamma=3), prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target)
    )
    assert "Nothing drafted" in drafted_from_html(trace, trace.rounds[0])
    second = trace.rounds[1]
    note = drafted_from_html(trace, second)
    verified_last = (trace.prompt_tokens + trace.rounds[0].emitted_texts)[second.prefix_len - 2]
    assert f"position {second.prefix_len - 2}" in note and f"«{verified_last}»" in note
    chain = speculative_decode(
        eagle_config(tiny_dirs, tiny_head[0]).replace(drafter="ngram"),
        prompt_ids=PROMPT,
        pair=ModelPair(tiny_pair.target),
    )
    assert drafted_from_html(chain, chain.rounds[0]) == ""  # drafters that do not read the target's states


def test_the_cli_decodes_with_eagle(tiny_dirs, tiny_head, capsys):
    from specviz.cli import main

    assert (
        main(
            [
                "generate",
                "--target",
                tiny_dirs["target"],
                "--drafter",
                "eagle",
                "--parallel-weights",
                str(tiny_head[0]),
                "--prompt",
                "w3 w7 w5",
                "--max-new-tokens",
                "8",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip()
    assert main(["train-eagle", "--unroll", "0"]) == 2
    assert "--unroll in [1, 8]" in capsys.readouterr().err


SHIPPED_FLOOR = 0.15  # held-out greedy acceptance per drafted token the shipped head stays above (untrained: ~0)


def test_the_shipped_head_is_the_trained_one(embedded):
    """The shipped file loads without training, is small, says how it was made, and is accepted held out."""
    import json

    from specviz.drafters.eagle_head import MANIFEST_FILE, WEIGHTS_FILE
    from specviz.training.draft_model import HELDOUT_FILE
    from specviz.training.eagle import heldout_acceptance
    from specviz.training.teacher_text import read_prompt_file

    assert WEIGHTS_FILE.stat().st_size < 15e6
    manifest = json.loads(MANIFEST_FILE.read_text(encoding="utf-8"))
    assert manifest["command"].startswith("python -m specviz train-eagle") and manifest["answers"] >= 1000
    head, _ = load_head(str(WEIGHTS_FILE))
    assert head.shape.hidden == embedded.model.config.hidden_size and head.shape.target == "embedded"
    prompts = read_prompt_file(HELDOUT_FILE)[:3]
    measured = heldout_acceptance(embedded, WEIGHTS_FILE, prompts, max_new_tokens=32, gamma=3)
    assert measured["acceptance"] > SHIPPED_FLOOR, measured
    config = DecodeConfig(drafter="eagle", gamma=3, max_new_tokens=24, device="cpu")
    for changes in ({}, dict(eagle_tree=True, tree_depth=3, eagle_top_k=3, eagle_budget=6)):
        trace = speculative_decode(config.replace(**changes), prompt=prompts[0], pair=ModelPair(embedded))
        assert trace.output_ids == target_greedy(embedded, trace.prompt_ids, 24)


def test_top_beta_one_with_eagle_is_greedy(tiny_dirs, tiny_pair, tiny_head):
    """The third rule: top-β with β = 1 and a loose τ accepts exactly the target's argmax."""
    config = eagle_config(tiny_dirs, tiny_head[0], gamma=3, rule="topbeta", beta=1, tau=100.0)
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target))
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)


def test_features_kept_while_generating_are_the_targets_own(tiny_pair):
    """The hidden states read off ``generate`` equal a separate forward's, and the target's argmax over them is the
    answer it gave (so each token's feature is computed once, and right)."""
    from specviz.models.loading import encode_prompt
    from specviz.training.eagle_text import forward_features
    from specviz.training.teacher_text import generate_batch

    target = tiny_pair.target
    prompts = [encode_prompt(target.tokenizer, p, True) for p in TINY_PROMPTS[:3]]
    kept = batch_sequences(generate_batch(target, prompts, 10, 0.0, 0, 4, keep_features=True))
    plain = [dataclasses.replace(s, features=None) for s in kept]
    for sequence, reference in zip(kept, forward_features(target, plain, progress=False)):
        assert sequence.features.shape == reference.shape == (len(sequence.ids), target.model.config.hidden_size)
        assert torch.allclose(sequence.features.float(), reference.float(), atol=2e-2)
        with torch.no_grad():
            answer = target.model.lm_head(sequence.features[sequence.prompt_len - 1 : -1].float()).argmax(-1)
        assert answer.tolist() == sequence.ids[sequence.prompt_len :].tolist()


def test_training_resumes_from_its_checkpoint(tiny_pair, tmp_path, monkeypatch):
    """A run that stopped after its checkpoint continues from it and ends where an unbroken run ends."""
    from specviz.training import eagle as training

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(training, "CHECKPOINT_EVERY", 5)
    target = tiny_pair.target
    batches = generate_teacher_text(
        target,
        TINY_PROMPTS[:8],
        new_tokens=12,
        temperatures=[0.0],
        seed=0,
        top_k=4,
        batch_size=8,
        progress=False,
        keep_features=True,
    )
    sequences = [s for b in batches for s in batch_sequences(b)]
    features = sequence_features(target, sequences, progress=False)
    config = target.model.config
    shape = EagleShape.of_target(target, draft_vocab=0)
    settings = EagleSettings(steps=12, rows_per_step=2, warmup=2, draft_vocab=0)
    ids = torch.arange(config.vocab_size)
    unbroken, losses = train_head(target, sequences, features, shape, ids, settings, progress=False)
    assert len(losses) == 12 and training.checkpoint_path(settings, target).is_file()  # the step-10 checkpoint
    resumed, resumed_losses = train_head(target, sequences, features, shape, ids, settings, progress=False)
    assert len(resumed_losses) == 2  # steps 10 and 11 only
    assert resumed_losses == losses[-2:]
    for (name, a), (_, b) in zip(unbroken.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
