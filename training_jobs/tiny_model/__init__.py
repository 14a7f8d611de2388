"""The project's own tiny chat model for CPU machines: build offline, train on reference-policy gold turns
(TRL SFT), evaluate on held-out comments, serve through an OpenAI-compatible server on loopback.

Plain Python (no Django): management commands in ``training_jobs/management/commands`` are thin wrappers.
Heavy imports (torch, transformers, trl) happen inside functions.
"""
