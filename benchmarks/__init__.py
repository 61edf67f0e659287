"""Benchmarks: redrive against plain calls and against its peers, on one workload.

Run them with ``scripts/bench`` (``--quick`` for a small size). Each figure is
measured in the same invocation as its baseline; see :mod:`benchmarks.run`.
"""
