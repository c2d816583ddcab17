"""jdlcore: the mathematics of adaptive joint distribution learning, on in-memory NumPy arrays."""
from .cholesky import PivotedCholesky, pivoted_cholesky
from .kernels import (
    DeltaKernel,
    GaussianKernel,
    Kernel,
    LaplaceKernel,
    Matern32Kernel,
    Matern52Kernel,
    kernel_from_dict,
    median_heuristic,
)

__version__ = "0.1.0"
from .basis import JDLReductions, SpectralBasis, spectral_basis
from .jdl import JDL, JDLProblem, build_problem
