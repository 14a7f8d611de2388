"""Evaluations: eval cases and sets (T1–T4), scoring and the runner (plain Python)."""
