"""Parallel verification: runs specviz/ui/pages/parallel_verification.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
