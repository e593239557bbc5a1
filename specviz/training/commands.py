"""The training commands: ``train-draft`` (the embedded draft model), ``train-drafter`` (parallel drafters) and
``train-eagle`` (the EAGLE head). Each trains for the embedded target from its own text; torch is imported only
when a command runs."""

from __future__ import annotations

import argparse
import sys

from specviz.drafters.registry import parallel_kinds
from specviz.settings import ConfigError


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


def train_drafter_command(args: argparse.Namespace) -> None:
    from pathlib import Path

    from specviz.drafters.parallel_heads import default_weights
    from specviz.models.loading import load_model
    from specviz.training.parallel_drafters import PROMPTS_FILE, read_prompts, train_and_save

    if not 1 <= args.k <= 16 or not 1 <= args.window <= 512 or not 1 <= args.steps <= 100_000 or args.batch_size < 1:
        raise ConfigError("train-drafter: --k must be in [1, 16], --window in [1, 512], --steps in [1, 100000]")
    target = load_model(args.target, args.device)
    out = Path(args.out) if args.out else default_weights(args.kind)
    command = "python -m specviz " + " ".join(sys.argv[1:]) if args.command else ""
    train_and_save(
        args.kind,
        target,
        out,
        new_tokens=args.new_tokens,
        command=command,
        prompts=read_prompts(Path(args.prompts) if args.prompts else PROMPTS_FILE),
        k=args.k,
        window=args.window,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
    )


def train_draft_command(args: argparse.Namespace) -> None:
    import dataclasses
    import json
    from pathlib import Path

    from specviz.models.embedded_draft import WEIGHTS_FILE
    from specviz.models.loading import load_model
    from specviz.training.distillation import TrainSettings
    from specviz.training.draft_model import train_draft

    try:
        temperatures = tuple(float(t) for t in args.temperatures.split(",")) if args.temperatures else None
    except ValueError as exc:
        raise ConfigError(
            f"train-draft: --temperatures takes comma-separated numbers; got {args.temperatures!r}"
        ) from exc
    given = dict(
        layers=tuple(args.layers) if args.layers else None,
        epochs=args.epochs,
        divergence=args.divergence,
        draft_vocab=args.draft_vocab,
        seed=args.seed,
        temperatures=temperatures,
        rows_per_step=args.rows_per_step,
        lr=args.lr,
        generation_batch=args.generation_batch,
    )
    settings = TrainSettings(**{k: v for k, v in given.items() if v is not None})
    if (
        not 1 <= len(settings.layers) <= 8
        or not 0 < settings.epochs <= 100
        or settings.draft_vocab < 0
        or not all(0 <= t <= 2 for t in settings.temperatures)
        or settings.rows_per_step < 1
        or settings.generation_batch < 1
        or not 0 < settings.lr < 1
    ):
        raise ConfigError(
            "train-draft: --layers takes 1 to 8 layer numbers, --epochs is in (0, 100], "
            "--draft-vocab >= 0, --temperatures in [0, 2], --rows-per-step and --generation-batch >= 1, "
            "--lr in (0, 1)"
        )
    target = load_model("embedded", args.device)  # float32: the teacher's probabilities in float32 on any device
    bad = [i for i in settings.layers if not 0 <= i < target.num_layers]
    if bad:
        raise ConfigError(f"train-draft: layers {bad} are not layers of the target (0..{target.num_layers - 1})")
    out = Path(args.out) if args.out else WEIGHTS_FILE
    manifest = train_draft(target, settings, out=out, command="python -m specviz " + " ".join(sys.argv[1:]))
    print(json.dumps(manifest, indent=2))
    print(f"saved {out} ({out.stat().st_size / 1e6:.1f} MB); settings {dataclasses.asdict(settings)}")


def train_eagle_command(args: argparse.Namespace) -> None:
    import json
    from pathlib import Path

    from specviz.drafters.eagle_head import WEIGHTS_FILE
    from specviz.models.loading import load_model
    from specviz.training.eagle import EagleSettings, train_eagle
    from specviz.training.eagle_text import TextSettings

    given = dict(
        steps=args.steps,
        rows_per_step=args.rows_per_step,
        lr=args.lr,
        kl_weight=args.kl_weight,
        noise=args.noise,
        unroll=args.unroll,
        draft_vocab=args.draft_vocab,
    )
    text = TextSettings(seed=args.seed, **({"answers": args.answers} if args.answers is not None else {}))
    settings = EagleSettings(text=text, seed=args.seed, **{k: v for k, v in given.items() if v is not None})
    if (
        not 1 <= text.answers <= 100_000
        or not 1 <= settings.steps <= 1_000_000
        or settings.rows_per_step < 1
        or not 0 < settings.lr < 1
        or settings.kl_weight < 0
        or settings.noise < 0
        or not 0 < settings.draft_vocab <= 10**6
        or not 1 <= settings.unroll <= 8
    ):
        raise ConfigError(
            "train-eagle: --answers in [1, 100000], --steps in [1, 1000000], --rows-per-step >= 1, "
            "--lr in (0, 1), --kl-weight and --noise >= 0, --draft-vocab > 0, --unroll in [1, 8]"
        )
    target = load_model("embedded", args.device)  # float32: the teacher's features and p in float32
    out = Path(args.out) if args.out else WEIGHTS_FILE
    manifest = train_eagle(target, settings, out=out, command="python -m specviz " + " ".join(sys.argv[1:]))
    print(json.dumps(manifest, indent=2))
    print(f"saved {out} ({out.stat().st_size / 1e6:.1f} MB)")


TRAINING_COMMANDS = {
    "train-drafter": train_drafter_command,
    "train-draft": train_draft_command,
    "train-eagle": train_eagle_command,
}
