"""Lesson player: runs specviz/ui/pages/lesson_player.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
