"""The progress-callback types: the one home of that small idea (no torch). A computation reports ``done`` of
``total`` steps as it goes; a page's bar and a shared job's waiting sessions draw it."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int], None]  # on_progress(done, total)
TextProgress = Callable[[int, int, str], None]  # on_progress(done, total, what runs now)
JobProgress = Callable[..., None]  # a shared job's: on_progress(done, total, text=None), either of the above
