"""Parallel drafters: runs specviz/ui/pages/parallel_drafters.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
