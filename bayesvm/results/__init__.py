"""Fit results: one type for every engine, summaries, ArviZ conversion, diagnostics."""
