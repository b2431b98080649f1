"""Inference engines. They take plain arrays and records and return plain outputs."""
