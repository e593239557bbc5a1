"""Prepare a lecture: runs specviz/ui/pages/lecture.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
