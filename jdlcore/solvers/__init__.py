"""Solvers of the low-rank JDL problem (22)-(25) on m_Y x m_X coefficient matrices H."""
from .closed_form import solve_normalized, solve_unconstrained
from .grid import GridSolution, grid_minimum, solve_grid_positivity
from .tightening import pointwise_bounds, product_bounds, solve_tightened, tightening_bounds

__all__ = [
    "solve_unconstrained",
    "solve_normalized",
    "solve_tightened",
    "tightening_bounds",
    "pointwise_bounds",
    "product_bounds",
    "solve_grid_positivity",
    "grid_minimum",
    "GridSolution",
]
