"""Loggers: observer-hook plugins that record a run (console lines, metrics.jsonl, plots)."""
