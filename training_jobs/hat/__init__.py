"""Harness-Aware Training (DESIGN.md section 7): the three stages (HSA-SFT, on-policy distillation, agentic RL)
and their rewards, as plain Python that the Celery GPU workers, the CLI and the tests run. No Django here."""
