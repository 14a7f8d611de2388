"""HSA — Harness-State Augmentation (DESIGN.md section 6), Django-free.

- :mod:`.samples` — the canonical sample (harness state + room + comments + target steps), its constructors
  from gold trajectories, the target check and the renderer to chat messages;
- :mod:`.operators` — the operators over five dimensions, ``op(state, sample, rng) -> (state', sample', map)``;
- :mod:`.relabel` — rename maps (compose, invert) and the independent binding-level check;
- :mod:`.names` — train and held-out name/phrasing pools and the held-out registry;
- :mod:`.dataset` — the recipe, the builder (augmented and fixed-harness), statistics and the (streaming) writer;
- :mod:`.regenerate` — labels by regeneration: a teacher endpoint re-answers under the augmented harness through
  the turn engine, a judge (rules + an optional judge endpoint) keeps only answers that pass.

Jobs, models and pages live elsewhere and call :func:`training_jobs.hsa.dataset.build` with progress and cancel
callbacks.
"""
