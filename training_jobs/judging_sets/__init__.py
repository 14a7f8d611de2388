"""The labelled judging sets (``data/judging/``): bad replies the reply rules (:mod:`streams.engine.rules`) must
catch and good replies they must pass, built from the demo model's recorded turns, the issue's examples and
mutations of gold replies. Build with ``python -m training_jobs.judging_sets`` (see :mod:`.build`)."""
