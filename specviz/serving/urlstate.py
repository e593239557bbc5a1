"""The app's state in URL query parameters: a copied link reopens the same trace.

Pure functions over a ``{name: str}`` mapping (no streamlit): parse every known parameter, keep
the valid ones, and explain each value that was malformed or out of range (it falls back to the
default). Only non-default values are written, so shared links stay short. The text form of a value
(:func:`parse_value`, :func:`format_value`) is the CLI's and the sidebar's text boxes' too.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from specviz.config import DecodeConfig, field_params, field_type
from specviz.settings import ConfigError

FieldValue = str | int | float | bool | tuple[int, ...] | None  # a setting's value, as its text form reads back


def parse_value(name: str, raw: str) -> FieldValue:
    """A field's value from text (a URL parameter, a CLI option, a text box); ValueError if malformed.

    Empty text means None for optional fields; skip_layers is comma-separated; booleans are 1/0/true/false."""
    kind, text = field_type(name), raw.strip()
    if "None" in kind and text.lower() in ("", "auto", "none"):
        return None
    if kind.startswith("tuple[int"):
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    if kind == "bool":
        if text.lower() not in ("1", "0", "true", "false"):
            raise ValueError(f"{name} must be 1, 0, true or false")
        return text.lower() in ("1", "true")
    if kind.startswith("int"):
        return int(text)
    if kind == "float":
        return float(text)
    return raw


def format_value(value: FieldValue) -> str:
    """The text :func:`parse_value` reads back as ``value``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


# Settable from a URL: the fields whose Param allows it (not the device, the recorded top-N or a
# weights path: those are the server's business). Applied in this order, each checked with those
# before it: the draft and the drafter come before the target, so a link naming a new target and its
# draft is valid at every step.
def url_fields() -> tuple[str, ...]:
    """The settings whose Param allows it, in the order a link applies them."""
    return ("draft", "drafter") + tuple(
        name for name, p in field_params().items() if p.url and name not in ("draft", "drafter")
    )


PROMPT_CHARS_MAX = 4000
VIEW = "view"  # the parameter naming the lesson player's view a link opens (on any page)
VIEWS = ("step", "present", "quiz", "race")  # the lesson player's views (specviz.presentation.player)
STUDENT = "student"  # the parameter of a student's link: the session reads the class's results, starts no costly work


def parse_student(params: Mapping[str, str]) -> tuple[bool, list[str]]:
    """Whether the link opens a student session (``student=1``; absent or ``0``: the teacher's), with a message for a
    value that is neither (it falls back to the teacher's, as any bad value falls back to its default)."""
    raw = params.get(STUDENT)
    if raw is None:
        return False, []
    text = str(raw).strip().lower()
    if text in ("1", "true", "0", "false"):
        return text in ("1", "true"), []
    return False, [f"URL parameter {STUDENT}={str(raw)[:20]!r} ignored (must be 1 or 0): a teacher's session"]


TEACHER = "teacher"  # the parameter of the teacher's own link: the key that owns the class's results
TEACHER_KEY = re.compile(r"[0-9a-f]{32}")  # a key as the app makes them (uuid4().hex)


def parse_teacher(params: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """The teacher's key a link carries (``teacher=<32 hex digits>``: the teacher's own link, never the address bar's,
    which drops it), with a message for a value that is not a key."""
    raw = params.get(TEACHER)
    if raw is None:
        return None, []
    if TEACHER_KEY.fullmatch(str(raw)):
        return str(raw), []
    return None, [f"URL parameter {TEACHER}={str(raw)[:8]!r}… ignored (not a teacher's key): this session has its own"]


@dataclasses.dataclass(frozen=True)
class UrlState:
    config: DecodeConfig
    prompt: str | None  # None: the parameter is absent
    round: int  # 1-based round to show
    student: bool  # a student's link (:data:`STUDENT`)
    messages: tuple[str, ...]  # one line per value that was ignored, and why
    teacher: str | None = None  # the teacher's key the link carries (:data:`TEACHER`)
    ignored: tuple[str, ...] = ()  # the settings whose value was ignored (said in ``messages``)


def _whole_link(params: Mapping[str, str], defaults: DecodeConfig) -> DecodeConfig | None:
    """Every URL field applied at once, if they parse and validate together (values that are only valid
    together, such as a wide tree with a shallow depth, need this); None otherwise."""
    try:
        config = defaults.replace(
            **{name: parse_value(name, str(params[name])) for name in url_fields() if name in params}
        )
        return config.validated()
    except (ValueError, ConfigError):
        return None


def _field_by_field(params: Mapping[str, str], defaults: DecodeConfig) -> tuple[DecodeConfig, list[str], list[str]]:
    """Apply the URL fields in order, each checked with those before it; explain each one ignored. Returns the
    config, the messages and the names of the fields ignored."""
    config, messages, ignored = defaults, [], []
    for name in url_fields():
        if name not in params:
            continue
        raw = str(params[name])
        try:
            candidate = config.replace(**{name: parse_value(name, raw)})
            candidate.validated()
        except (ValueError, ConfigError) as exc:
            reason = str(exc) if isinstance(exc, ConfigError) else "malformed"
            messages.append(f"URL parameter {name}={raw[:40]!r} ignored ({reason}); using {defaults.value(name)!r}")
            ignored.append(name)
            continue
        config = candidate
    return config, messages, ignored


def parse_view(params: Mapping[str, str]) -> list[str]:
    """A message for a ``view=`` the lesson player has not (a link's view opens it on any page: ``VIEWS``)."""
    view = params.get(VIEW)
    if view is None or view in VIEWS:
        return []
    return [f"URL parameter {VIEW}={str(view)[:20]!r} ignored (must be one of {', '.join(VIEWS)}); showing the page"]


def parse_query(params: Mapping[str, str], defaults: DecodeConfig) -> UrlState:
    """Read a URL's query parameters into a validated config; bad values fall back with a message."""
    config = _whole_link(params, defaults)
    messages: list[str] = parse_view(params)
    ignored: list[str] = []
    if config is None:  # the link does not hold as a whole: keep what holds, field by field
        config, field_messages, ignored = _field_by_field(params, defaults)
        messages += field_messages
    prompt = params.get("prompt")
    if prompt is not None and len(prompt) > PROMPT_CHARS_MAX:
        messages.append(f"URL parameter prompt is {len(prompt)} characters long; it was cut to {PROMPT_CHARS_MAX}")
        prompt = prompt[:PROMPT_CHARS_MAX]
    round_index = 1
    if "round" in params:
        try:
            round_index = int(params["round"])
            if round_index < 1:
                raise ValueError
        except ValueError:
            messages.append(f"URL parameter round={str(params['round'])[:20]!r} ignored (must be a positive integer)")
            round_index = 1
    student, student_messages = parse_student(params)
    teacher, teacher_messages = parse_teacher(params)
    messages += student_messages + teacher_messages
    return UrlState(config, prompt, round_index, student, tuple(messages), teacher, tuple(ignored))


def to_query(
    config: DecodeConfig,
    prompt: str,
    round_index: int,
    defaults: DecodeConfig,
    student: bool = False,
    pinned: tuple[str, ...] = (),
) -> dict[str, str]:
    """The query parameters that reproduce ``config``, ``prompt``, the shown round and a student's session: each
    setting that differs from ``defaults``, and those ``pinned`` (defaults that may yet change) whatever they hold."""
    query: dict[str, str] = {}
    for name in url_fields():
        value = config.value(name)
        if value == defaults.value(name) and name not in pinned:
            continue
        query[name] = format_value(value)
    query["prompt"] = prompt
    if round_index > 1:
        query["round"] = str(round_index)
    if student:
        query[STUDENT] = "1"
    return query
