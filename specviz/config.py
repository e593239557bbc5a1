"""The decoding configuration: one frozen record, validated in one place.

Every entry point (CLI, app, URL query parameters) builds a :class:`DecodeConfig` and calls
:meth:`DecodeConfig.validated`, so a bad value always meets the same clear message.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from specviz.drafters.registry import DRAFTERS, RULES, drafter_entry

EMBEDDED, EMBEDDED_DRAFT = "embedded", "embedded-draft"  # the shipped pair's model specs
TREE_MODES = ("constant", "beam")  # RSD-C (constant branching) | RSD-S (stochastic beam search)
TREE_NODES_MAX = 256  # drafted tokens per tree: one target pass scores them all, so keep it bounded

GAMMA_MAX = 16  # more drafted tokens per round than this never pays and crowds the round view
BETA_MAX = 10  # SpecDec uses beta <= 5; 10 leaves room to show how lossy large beta gets
MAX_NEW_TOKENS_MAX = 512  # bounds one request's work so a single user cannot hold the machine
PROMPT_TOKENS_MAX = 2048  # a longer prompt is refused with a message, not truncated silently
TOP_N_MAX = 50


class ConfigError(ValueError):
    """A configuration value is out of range or malformed; the message names the field."""


DTYPES = ("float32", "bfloat16", "float16")

DRAFT_VOCAB_CHOICES = (None, 1024, 2048, 4096, 8192, 16384, 32768, 0)  # None: as the draft ships; 0: every token


def vocab_label(k: int | None) -> str:
    return "as shipped" if k is None else "all tokens" if k == 0 else f"top {k:,} tokens"


@dataclass(frozen=True)
class Param:
    """How a config field describes itself: its checks, its sidebar widget, its CLI flag, its URL parameter.

    ``low``/``high`` bound the value (``low_open``: low itself excluded); ``shown`` narrows the widget's
    range where the valid range is wider than a slider should be. ``widget`` "none": the page draws
    it (the model pair) or nobody does (device, top_n). ``when``: the widget is enabled only while
    another field has this value. Drafter and rule widgets are enabled by their registry entries.
    """

    label: str
    help: str = ""
    widget: str = "slider"  # slider | radio | select | number | text | checkbox | none
    section: str = "Verification"  # Models | Verification | Prompt
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    shown: tuple[float, float] | None = None
    step: float | None = None
    choices: tuple = ()
    choice_labels: tuple[str, ...] = ()
    when: tuple[str, str] | None = None
    url: bool = True
    cli: bool = True


def param(default, **described) -> dataclasses.Field:
    return dataclasses.field(default=default, metadata={"param": Param(**described)})


@dataclass(frozen=True)
class DecodeConfig:
    """Everything that determines a trace (together with the prompt). Each field carries its
    :class:`Param`: the CLI's options, the URL parser and the sidebar's widgets are made from them."""

    target: str = param(EMBEDDED, label="Target model", widget="none", section="Models",
                        help="target model: 'embedded' (default), a hub id, or a save_pretrained directory")
    draft: str | None = param(None, label="Draft model", widget="none", section="Models",
                              help="draft model spec (for drafter 'model'); with the embedded target the default is "
                                   "'embedded-draft', the shipped distilled draft")
    drafter: str = param("model", label="Drafter", widget="radio", section="Models", choices=tuple(DRAFTERS),
                         choice_labels=tuple(s.label for s in DRAFTERS.values()),
                         help="who drafts: " + " · ".join(f"{s.label}: {s.help}" for s in DRAFTERS.values()))
    draft_vocab: int | None = param(None, label="Draft head (FR-Spec vocabulary)", widget="select", section="Models",
                                    low=0, high=10**7, choices=DRAFT_VOCAB_CHOICES,
                                    choice_labels=tuple(map(vocab_label, DRAFT_VOCAB_CHOICES)),
                                    help="the draft model scores only its K most frequent tokens (Zhao et al. 2025): "
                                         "cheaper drafting, q = 0 elsewhere, every rule stays exact; 0 = all tokens; "
                                         "default: the size the draft ships with (8,192 for the embedded draft)")
    skip_layers: tuple[int, ...] | None = param(None, label="Layers to skip", widget="text", section="Models",
                                                help="layer-skip drafter: comma-separated layer numbers, e.g. 10,11,12 "
                                                     "(default: the two middle layers)")
    exit_threshold: float = param(0.0, label="Adaptive draft exit threshold", section="Models", low=0.0, high=1.0,
                                  step=0.05,
                                  help="layer-skip: stop drafting when the draft's top-1 probability falls below this "
                                       "(0 = off)")
    ngram_max: int = param(3, label="n-gram length", section="Models", low=1, high=8,
                           help="n-gram drafter: the longest suffix looked up in earlier text")
    tree_mode: str = param("constant", label="Tree", widget="radio", section="Models", choices=TREE_MODES,
                           choice_labels=("RSD-C: constant branching", "RSD-S: stochastic beam"),
                           help="tree drafter: constant branching (RSD-C, Gumbel-top-k) or beam "
                                "(RSD-S, stochastic beam search)")
    branching: int = param(2, label="Branching factor (RSD-C)", section="Models", low=1, high=8,
                           when=("tree_mode", "constant"), help="tree drafter, constant mode: children per node")
    tree_depth: int = param(3, label="Tree depth (draft iterations)", section="Models", low=1, high=GAMMA_MAX,
                            help="tree drafter: draft iterations, the tree's depth")
    beam_width: int = param(4, label="Beam width (RSD-S)", section="Models", low=1, high=32, when=("tree_mode", "beam"),
                            help="tree drafter, beam mode: nodes kept per level")
    eagle_tree: bool = param(False, label="EAGLE-2 dynamic tree", widget="checkbox", section="Models",
                             help="EAGLE: draft a dynamic tree (EAGLE-2: expand the most confident nodes, keep the "
                                  "budget best by the product of the draft's confidences) instead of a chain")
    eagle_top_k: int = param(4, label="EAGLE-2 top-k (nodes expanded per level, children each)", section="Models",
                             low=1, high=8, when=("eagle_tree", True),
                             help="EAGLE-2: the nodes expanded at each level, and the children each gets")
    eagle_budget: int = param(8, label="EAGLE-2 budget (tokens verified per round)", section="Models", low=1, high=64,
                              when=("eagle_tree", True), help="EAGLE-2: nodes kept after the rerank, verified at once")
    rule: str = param("greedy", label="Rule", widget="radio", choices=tuple(RULES),
                      choice_labels=tuple(s.label for s in RULES.values()),
                      help="verification rule: " + " · ".join(f"{s.label}: {s.help}" for s in RULES.values()))
    # 2: the CLI's default; the app's is the best gamma of this machine's measured profile (ui.work.app_defaults)
    gamma: int = param(2, label="Block size γ (drafted tokens per round)", low=1, high=GAMMA_MAX,
                       help="tokens drafted per round (block size)")
    beta: int = param(3, label="β (target's top tokens a draft may be)", low=1, high=BETA_MAX,
                      help="top-beta: a drafted token must be among the target's beta best (SpecDec)")
    tau: float = param(5.0, label="τ (max log p(top1) − log p(token))", low=0.0, high=math.inf, shown=(0.0, 10.0),
                       step=0.1, help="top-beta: max log p(top1) - log p(token) (SpecDec's tolerance)")
    temperature: float = param(1.0, label="Temperature", low=0.0, high=100.0, shown=(0.0, 2.0), step=0.05,
                               help="sampling: temperature applied to both p and q (0 = argmax)")
    top_k: int = param(0, label="Top-k (0 = off)", low=0, high=10**7, shown=(0, 200),
                       help="sampling: keep the k most likely tokens of p and q (0 = off)")
    top_p: float = param(1.0, label="Top-p", low=0.0, high=1.0, low_open=True, shown=(0.05, 1.0), step=0.05,
                         help="sampling: nucleus mass of p and q, in (0, 1] (1 = off)")
    seed: int = param(0, label="Seed", widget="number", low=0, high=2**63 - 1,
                      help="seeds every random draw, so a config reproduces its trace")
    max_new_tokens: int = param(32, label="Max new tokens", low=1, high=MAX_NEW_TOKENS_MAX, shown=(1, 256),
                                help="stop after this many new tokens")
    chat_template: bool = param(True, label="Apply the chat template", widget="checkbox", section="Prompt",
                                help="wrap a text prompt in the tokenizer's chat template if it has one")
    parallel_weights: str | None = param(None, label="Parallel drafter weights", widget="none", url=False,
                                         help="blockwise / maskquery / eagle: a trained weights file "
                                              "(default: the shipped one)")
    top_n: int = param(10, label="Top tokens recorded", widget="none", url=False, low=1, high=TOP_N_MAX,
                       help="how many top tokens of each distribution a trace records")
    device: str = param("auto", label="Device", widget="none", url=False,
                        help="auto (CUDA if available), cpu, cuda, cuda:N")
    dtype: str = param("float32", label="Precision", widget="radio", section="Models", choices=DTYPES,
                       choice_labels=("float32 (exact)", "bfloat16", "float16"),
                       help="the models' weights and activations; every probability a rule uses is float32 either way. "
                            "float32: greedy output token-identical to the target's own generate. bfloat16 / float16: "
                            "half the memory traffic, but a pass over k + 1 tokens rounds differently from k + 1 "
                            "one-token steps, so the output is lossless only up to floating-point rounding")

    def validated(self) -> "DecodeConfig":
        """Return self if every field is in range, else raise :class:`ConfigError`."""
        for name, described in field_params().items():
            _check_described(name, getattr(self, name), described)
        _check(bool(str(self.target).strip()), "target model must not be empty")
        _check(
            drafter_entry(self.drafter).draft_model != "always" or bool(self.draft_spec),
            f"drafter {self.drafter!r} needs a draft model (--draft); only the embedded target has a built-in one",
        )
        _check(self.tree_nodes() <= TREE_NODES_MAX,
               f"the draft tree would have {self.tree_nodes()} nodes; the limit is {TREE_NODES_MAX} "
               "(lower branching or depth)")
        if self.skip_layers is not None:
            _check(all(isinstance(i, int) and i >= 0 for i in self.skip_layers),
                   "skip_layers must be layer indices >= 0")
        return self

    @property
    def draft_spec(self) -> str | None:
        """The draft model to load: the one named, else the shipped embedded draft for the embedded
        target's draft-model drafter (trees without a named draft use the layer-skip self-draft)."""
        if self.draft and str(self.draft).strip():
            return str(self.draft).strip()
        always = self.drafter in DRAFTERS and drafter_entry(self.drafter).draft_model == "always"
        return EMBEDDED_DRAFT if always and self.target == EMBEDDED else None

    def tree_nodes(self) -> int:
        """Drafted tokens per round of a tree: sum of b^k (RSD-C), width x depth (RSD-S), or EAGLE-2's budget."""
        if drafter_entry(self.drafter).tree_when:
            return self.eagle_budget
        if self.tree_mode == "beam":
            return self.beam_width * self.tree_depth
        return sum(self.branching**k for k in range(1, self.tree_depth + 1))

    def replace(self, **changes) -> "DecodeConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["skip_layers"] = list(self.skip_layers) if self.skip_layers is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DecodeConfig":
        d = dict(d)
        if d.get("skip_layers") is not None:
            d["skip_layers"] = tuple(d["skip_layers"])
        return cls(**d)


@functools.cache
def field_params() -> dict[str, Param]:
    """Every config field's :class:`Param`, in field order."""
    return {f.name: f.metadata["param"] for f in dataclasses.fields(DecodeConfig)}


@functools.cache
def field_type(name: str) -> str:
    """The field's annotation as written, e.g. "int", "float", "str | None", "tuple[int, ...] | None"."""
    return next(f.type for f in dataclasses.fields(DecodeConfig) if f.name == name)


def _check_described(name: str, value, described: Param) -> None:
    """The checks a field's Param implies: its choices, or its numeric range."""
    if value is None and "None" in field_type(name):
        return
    if described.choices and isinstance(value, str):
        _check(value in described.choices, f"{name} must be one of {', '.join(described.choices)}; got {value!r}")
    elif described.low is None:
        return
    elif isinstance(described.low, int) and isinstance(described.high, int):
        _check_int(name, value, described.low, described.high)
    elif described.low_open:
        _check(_is_number(value) and described.low < value <= described.high,
               f"{name} must be in ({described.low:g}, {described.high:g}]; got {value!r}")
    else:
        _check_float(name, value, described.low, described.high)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_int(name: str, value, low: int, high: int) -> None:
    _check(
        isinstance(value, int) and not isinstance(value, bool) and low <= value <= high,
        f"{name} must be an integer in [{low}, {high}]; got {value!r}",
    )


def _check_float(name: str, value, low: float, high: float) -> None:
    ok = _is_number(value) or (value == math.inf and high == math.inf)
    _check(ok and low <= value <= high, f"{name} must be a number in [{low}, {high}]; got {value!r}")
