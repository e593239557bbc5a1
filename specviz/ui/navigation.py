"""The app's pages, listed once: the main script builds its navigation from this list and the tests walk it.

A page is one script in ``specviz/ui/pages/``, one :class:`PageEntry` line below, and a two-line file of the same name
in the checkout's top-level ``pages/`` that runs it (:func:`run_page`). Streamlit resolves a page's path against the
main script it started: the checkout's ``app.py`` (``streamlit run app.py``) finds the top-level files, the package's
``specviz/ui/app.py`` (``specviz app`` from a wheel) the packaged scripts themselves; either way the same code runs.
Icons are streamlit's Material Symbols (a font streamlit ships), so they render without an emoji font.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from types import CodeType

import streamlit as st
from streamlit.navigation.page import Page
from streamlit.runtime.scriptrunner import get_script_run_ctx

from specviz.presentation.player import VIEWS
from specviz.ui.state import session

PAGE_SCRIPTS = Path(__file__).resolve().parent / "pages"


@dataclass(frozen=True)
class PageEntry:
    script: str  # the file's stem in pages/
    title: str
    icon: str

    @property
    def path(self) -> str:
        """The script's path relative to the main script (streamlit resolves page paths against the main script:
        the checkout's ``app.py`` or the package's ``specviz/ui/app.py``)."""
        return f"pages/{self.script}.py"


PAGES = (
    PageEntry("round_view", "Round view", ":material/view_timeline:"),
    PageEntry("lesson_player", "Lesson player", ":material/school:"),
    PageEntry("race", "Race", ":material/sprint:"),
    PageEntry("metrics", "Metrics and theory", ":material/monitoring:"),
    PageEntry("gamma_sweep", "Gamma sweep", ":material/tune:"),
    PageEntry("what_if", "What if: two settings", ":material/compare_arrows:"),
    PageEntry("compare_rules", "Compare rules", ":material/balance:"),
    PageEntry("losslessness", "Losslessness lab", ":material/casino:"),
    PageEntry("numerics", "Precision and rounding", ":material/calculate:"),
    PageEntry("parallel_verification", "Parallel verification", ":material/timer:"),
    PageEntry("recursive", "Recursive (tree) drafts", ":material/account_tree:"),
    PageEntry("parallel_drafters", "Parallel drafters", ":material/extension:"),
    PageEntry("engine_report", "Your engine's numbers", ":material/dns:"),
    PageEntry("lecture", "Prepare a lecture", ":material/event_available:"),
)


def run_page(page_file: str) -> None:
    """Run the packaged page script named like ``page_file`` (a top-level ``pages/`` file) as streamlit runs a page:
    afresh, as ``__main__``, from its code compiled once per process."""
    path = PAGE_SCRIPTS / Path(page_file).name
    exec(compiled(path), {"__name__": "__main__", "__file__": str(path)})


@functools.cache
def compiled(script: Path) -> CodeType:
    """A page script's code (a class opens hundreds of page runs at once: each compiles nothing)."""
    return compile(script.read_text(encoding="utf-8"), str(script), "exec")


def navigation() -> Page:
    """streamlit's navigation over :data:`PAGES`, the first page the default. ``st.Page`` resolves its file on the
    filesystem (a stat per path component, for every page, on every run): the pages are built once per main script
    and each run navigates over its own copies (streamlit marks the copy it runs, so no two runs share one). The list
    is always whole: folded, streamlit would hide the pages past the tenth under "View N more"."""
    main_script = get_script_run_ctx(suppress_warning=True)
    pages = built_pages(main_script.main_script_path if main_script else "")
    return st.navigation([copy.copy(page) for page in pages], expanded=True)


@functools.cache
def built_pages(main_script: str) -> tuple[Page, ...]:
    """The pages as ``st.Page`` builds them for ``main_script`` (the cache's key: st.Page resolves against it)."""
    return tuple(st.Page(p.path, title=p.title, icon=p.icon, default=i == 0) for i, p in enumerate(PAGES))


LESSON_PLAYER = "lesson_player"
QUIZ_GATED = ("", "race", "metrics", "what_if", "compare_rules", "parallel_verification", "recursive")
"""The pages that hold a student's verdicts themselves (:func:`specviz.ui.views.hold_for_quiz`; "" the Round view)."""
LESSON_VIEWS = tuple(view for view in VIEWS if view != "step")  # the player's views a link may name on any page


def open_lesson_view(page: Page) -> None:
    """A link naming a lesson view (``view=quiz``, ``present`` or ``race``) opens the lesson player on that view and
    the link's round, with the link's settings, whichever page path it names: the Round view's ``/``, another page,
    or an unknown or differently-cased path (which streamlit opens as the default page). A quiz link never opens a
    page that shows the verdicts. The switch comes before the sidebar is drawn, so streamlit drops the sidebar widgets'
    states: in a session already open (a Back or Forward to such a link) the lesson player seeds them from the link
    again, as a session's first run does. A student's session already open keeps a page of :data:`QUIZ_GATED` on a
    quiz link: such a page holds its verdicts until the quiz answered them, and once it has, it opens (the link's
    sticky ``view=quiz`` would otherwise keep the student in the player); any other page opens the player's quiz."""
    view = st.query_params.get("view")
    if view == "quiz" and session.initialized and session.student and page.url_path in QUIZ_GATED:
        return
    if view in LESSON_VIEWS and page.url_path != LESSON_PLAYER:
        session.initialized = False
        st.switch_page(f"pages/{LESSON_PLAYER}.py", query_params=st.query_params.to_dict())
