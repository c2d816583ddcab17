"""Low-rank kernel algebra: the pivoted Cholesky driver and its storages, and the double-orthogonal bases with the m x m reductions of the JDL problem."""
