"""flowjit's benchmark harness: flowjit against NumPy, JAX, TensorFlow and PyTorch on the same workloads.

Run ``python -m bench`` (or ``python bench/run.py``) from the repository root; ``--help``
lists the options. Every workload reports medians over repeats after warm-up, and ratios,
because the machine it runs on is shared and noisy. Peers that are not installed are
skipped; a workload or peer that fails prints its error in its cell and the run goes on.
"""
