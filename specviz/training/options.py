"""The training commands' options (``train-draft``, ``train-drafter``, ``train-eagle``), added to the CLI's
subcommands; what each runs is in :mod:`specviz.training.commands`. No torch."""

from __future__ import annotations

import argparse

from specviz.registry.drafters import parallel_kinds


def int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def add_training_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The three commands' parsers, added to the CLI's subparsers."""
    draft = commands.add_parser("train-draft", help="distil the embedded draft model from the embedded target")
    draft.add_argument(
        "--layers",
        type=int_list,
        default=None,
        help="the target's decoder layers the draft starts from (default 0,10,20,29)",
    )
    draft.add_argument("--epochs", type=float, default=None, help="passes over the teacher text (default 6)")
    draft.add_argument(
        "--divergence", choices=("fkl", "tvd"), default="fkl", help="forward KL (default) or total variation"
    )
    draft.add_argument(
        "--temperatures",
        default=None,
        help="comma-separated: the target answers each prompt once per temperature, 0 = greedy (default 0,0.7)",
    )
    draft.add_argument(
        "--draft-vocab", type=int, default=None, help="FR-Spec head size the engine uses by default (default 8192)"
    )
    draft.add_argument("--rows-per-step", type=int, default=None, help="answers per optimiser step (default 8)")
    draft.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3)")
    draft.add_argument(
        "--generation-batch",
        type=int,
        default=None,
        help="prompts the target answers per generate call (default 64; part of the cache key)",
    )
    draft.add_argument("--seed", type=int, default=0)
    draft.add_argument("--device", default="auto")
    draft.add_argument(
        "--out", default=None, help="weights file (default: the shipped specviz/weights/smollm2-135m-draft.safetensors)"
    )
    train = commands.add_parser(
        "train-drafter", help="train a parallel drafter (blockwise heads or mask-query) on the target's own text"
    )
    train.add_argument("--kind", choices=parallel_kinds(), required=True, help="which drafter to train")
    train.add_argument(
        "--target", default="embedded", help="target model spec (default: the embedded SmolLM2-135M-Instruct)"
    )
    train.add_argument("--k", type=int, default=4, help="tokens drafted per pass (1-16)")
    train.add_argument("--window", type=int, default=32, help="mask-query: target states each query may attend to")
    train.add_argument("--steps", type=int, default=2000, help="optimiser steps")
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--new-tokens", type=int, default=160, help="tokens the target generates per training prompt")
    train.add_argument(
        "--prompts", default=None, help="prompts file, one per line (default: specviz/data/train_prompts.txt)"
    )
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="auto")
    train.add_argument(
        "--out", default=None, help="weights file (default: the shipped specviz/weights/ file for the kind)"
    )
    eagle = commands.add_parser(
        "train-eagle",
        help="train the EAGLE head (one layer on the target's features) for "
        "the embedded target on its own greedy answers; every setting "
        "defaults to the shipped head's (training/eagle_loss.py: EagleSettings)",
    )
    eagle.add_argument(
        "--answers",
        type=int,
        default=None,
        help="prompts the target answers (the first of the committed prompt files; cached, resumable)",
    )
    eagle.add_argument("--steps", type=int, default=None, help="optimiser steps (a checkpoint every 250; resumable)")
    eagle.add_argument("--rows-per-step", type=int, default=None, help="answers per optimiser step")
    eagle.add_argument("--lr", type=float, default=None, help="peak learning rate")
    eagle.add_argument("--kl-weight", type=float, default=None, help="weight of the KL to the target's p")
    eagle.add_argument("--noise", type=float, default=None, help="uniform noise on the input features (EAGLE)")
    eagle.add_argument(
        "--unroll",
        type=int,
        default=None,
        help="drafting steps unrolled in training, the head reading its own features (1: EAGLE-1)",
    )
    eagle.add_argument("--draft-vocab", type=int, default=None, help="FR-Spec head size K the head ships with")
    eagle.add_argument("--seed", type=int, default=0)
    eagle.add_argument("--device", default="auto")
    eagle.add_argument(
        "--out", default=None, help="weights file (default: the shipped specviz/weights/smollm2-135m-eagle.safetensors)"
    )
