"""Learned cost models: predict each algorithm's time on a shape never measured, from this
machine's own timings in the tuning database.

- :mod:`.features`: a candidate (problem, algorithm, variant) as numbers.
- :mod:`.models`: the model families (roofline least squares, LightGBM trees), stored as data.
- :mod:`.fit`: fit from the database's timings, compare families by held-out regret.
- :mod:`.stored`: a model read back from the database, ranking a problem's candidates.

The "predicted" policy (:mod:`convsel.policies.predicted`) answers from these.
"""
