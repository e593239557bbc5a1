"""What a page offers before costly work runs: its estimate here (said on its button), and who may start it (a
student's session may not: it reads what the class already has)."""

from __future__ import annotations

import uuid

from specviz.models.profile import held_profile
from specviz.serving.pairs import loaded_target
from specviz.serving.works import Work
from specviz.ui.state import session
from specviz.ui.teacher_links import remembered_teacher_key

NOT_PREPARED = (
    "Your teacher has not prepared this yet: it appears here once it is computed (a student's link starts no costly "
    "computation)."
)


def estimated(work: Work) -> float | None:
    """What ``work`` costs here before it runs, from its target's profile and its prompt's tokens (None while its
    pair is not loaded)."""
    target = loaded_target(work.config)
    if target is None:
        return None
    return work.estimated_seconds(held_profile(target), len(target.tokenizer.encode(work.prompt)))


def estimate_label(label: str, work: Work, estimate: float | None) -> str:
    """A button's label with what pressing it costs here (as :func:`estimated` estimates it), when known."""
    if estimate is None:
        return label
    duration = f"about {estimate:.0f} s" if estimate < 90 else f"about {estimate / 60:.0f} min"
    duration = "under a second" if estimate < 1 else duration
    return f"{label} ({duration} here{', plus loading the models' if work.loads_pairs else ''})"


def may_start() -> bool:
    """Whether this session may start costly work: a teacher's may; a student's link (``student=1``) reads what the
    class already has."""
    return not session.student


def own_key() -> str:
    """The key this session's measurements are owned by, set on its first run before anything can be measured
    (:func:`~specviz.ui.opening.init_state_from_url`): the teacher's link's (``teacher=``), else the one this browser
    remembers (:mod:`specviz.ui.teacher_links`; every tab of the browser shares it), else a new one. A class's result
    belongs to the key that measured or prepared it first; another session's Measure again is its own
    (:func:`specviz.ui.waiting.measured_again`)."""
    if not session.teacher_key:  # a run before the first run's opening (none draws a page): made as it would be
        session.teacher_key = remembered_teacher_key() or uuid.uuid4().hex
    return session.teacher_key


def measure_again_hint() -> str:
    """What a page says after a timing that measured the load: the teacher may measure it again, a student may not."""
    return " **Measure again** when the machine is quiet." if may_start() else ""
