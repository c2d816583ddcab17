"""jdlcore: the mathematics of adaptive joint distribution learning, on in-memory NumPy arrays.

No Dask, no Prefect, no I/O: the pipeline feeds these functions.
"""
from .basis import JDLReductions, SpectralBasis, spectral_basis
from .cme import CME
from .compression import amcmd, compress, jmmd, run_compression
from .greedy import ClassBasis, GreedyJDL
from .klr import KLR
from .polynomial import PolynomialBasis, PolynomialJDL
from .psd import GaussianPSDModel
from .psd_fit import fit_psd_density
from .psd_jdl import PSDJDL
from .cholesky import Factorisation, FactorStorage, InMemoryFactorStorage, PivotedCholesky, pivoted_cholesky, run_pivoted_cholesky
from .degeneracy import DegeneracyWarning, GridBudgetWarning
from .jdl import JDL, JDLProblem, build_problem
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
from .losses import ClippedLogisticLoss, SecondMomentLoss, clipped_logistic_loss, relative_second_moment_loss
from .tuning import TuneResult, tune
from .estimator import Estimator, UnsupportedQuery
from .registry import METHODS, estimator_class

__version__ = "0.1.0"

__all__ = [
    "GaussianKernel", "LaplaceKernel", "Matern32Kernel", "Matern52Kernel", "DeltaKernel", "Kernel",
    "kernel_from_dict", "median_heuristic", "pivoted_cholesky", "run_pivoted_cholesky", "PivotedCholesky",
    "Factorisation", "FactorStorage", "InMemoryFactorStorage", "JDL", "JDLProblem", "build_problem", "JDLReductions",
    "SpectralBasis", "spectral_basis", "tune", "TuneResult", "SecondMomentLoss", "ClippedLogisticLoss",
    "relative_second_moment_loss", "clipped_logistic_loss", "CME", "KLR", "PolynomialJDL", "PolynomialBasis",
    "GreedyJDL", "ClassBasis", "GaussianPSDModel", "fit_psd_density", "PSDJDL", "amcmd", "jmmd", "compress",
    "run_compression", "DegeneracyWarning", "GridBudgetWarning", "METHODS", "estimator_class", "Estimator",
    "UnsupportedQuery",
]
