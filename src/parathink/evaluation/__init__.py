"""mean@k, pass@k, best@k and the behaviour metrics on test sets and benchmarks."""
