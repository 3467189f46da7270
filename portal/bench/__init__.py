"""Benchmarks of the hub side, run against a running cluster in a box (`make up`, or the one DSPORTAL_CONFIG names).

    python -m portal.bench.spawn         # spawning servers
    python -m portal.bench.dashboard     # the dashboard under 200 users: latency, errors, Slurm calls
    python -m portal.bench.liveness      # submit -> first images/sec in TensorBoard; event file -> TensorBoard
"""
