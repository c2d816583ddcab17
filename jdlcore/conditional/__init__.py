"""Conditional laws and what queries read from them: the support atoms, the per-row projection onto probability vectors, test functions, quantiles, smoothed curves and the validation losses."""
