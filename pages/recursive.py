"""Recursive (tree) drafts: runs specviz/ui/pages/recursive.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
