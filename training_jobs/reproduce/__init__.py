"""HAT in miniature (issue 15): ``manage.py reproduce_hat`` trains the fixed-harness SFT baseline and the three HAT
arms from one base with one budget and seed (:mod:`.arms`, :mod:`.data`, :mod:`.budgets`), evaluates them and the
base (:mod:`.evaluate`) and writes one table (:mod:`.table`); :mod:`.run` ties them together. Plain Python."""
