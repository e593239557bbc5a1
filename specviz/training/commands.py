"""The training commands: ``train-draft`` (the embedded draft model), ``train-drafter`` (parallel drafters) and
``train-eagle`` (the EAGLE head). Each trains for the embedded target from its own text; torch is imported only
when a command runs. Their options: :mod:`specviz.training.options`."""

from __future__ import annotations

import argparse
import sys

from specviz.settings import ConfigError


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
