"""Analyses behind the teaching pages, one module per page; pure data in, plain data (pandas) out.

Every long computation takes ``on_progress(done, total)`` so a page can show a progress bar, and
every size is bounded (``common``) so one user cannot occupy the machine for minutes. No streamlit.
"""
