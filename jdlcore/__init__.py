"""jdlcore: the mathematics of adaptive joint distribution learning, on in-memory NumPy arrays.

No Dask, no Prefect, no I/O: the pipeline feeds these functions. The subpackages, each importing only
those before it:

* ``kernels``, ``validation``: kernels and the checks of every argument;
* ``lowrank``: the pivoted Cholesky driver (in memory here, chunked in ``pipeline``), the
  double-orthogonal bases and the m x m reductions;
* ``solvers``: the constrained solves of the small problems;
* ``conditional``: conditional laws on support atoms, their projection onto probability vectors,
  test functions, quantiles, smoothed curves and the validation losses;
* ``models``: the estimator contract, the estimators (JDL, CME, KLR, the polynomial, greedy and PSD
  JDLs), the method registry ``METHODS`` and the degeneracy checks;
* ``tuning``: the grid search; ``compression``: conditional distribution compression; ``psd``: PSD
  density models.

Importing jdlcore sets ``OPENBLAS_THREAD_TIMEOUT=4`` where the environment has no value, before NumPy
loads. This is the one setting the package makes at import, on purpose: OpenBLAS reads it only when it
loads, and every way into the product (``pipeline``, ``flows``, the ``jdl`` command, a script that
imports jdlcore) loads NumPy through here. OpenBLAS's worker threads otherwise spin about 2^28 cycles
after each call before they sleep, while the kernel thread pool (``kernels``) works on the same cores
right after BLAS products: the pivoted Cholesky alternates the two in every round (docs/python.md has
the measurement). Where NumPy was imported before jdlcore its threads keep spinning: set the variable
in the environment, or import jdlcore first.
"""
import os as _os

_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # 2^4 cycles: idle OpenBLAS threads sleep at once

from .compression import amcmd, compress, jmmd, run_compression
from .conditional.losses import ClippedLogisticLoss, SecondMomentLoss, clipped_logistic_loss, relative_second_moment_loss
from .kernels import (
    DeltaKernel, GaussianKernel, Kernel, LaplaceKernel, Matern32Kernel, Matern52Kernel, kernel_from_dict, median_heuristic,
)
from .lowrank.basis import JDLReductions, SpectralBasis, spectral_basis
from .lowrank.cholesky import (
    Factorisation, FactorStorage, InMemoryFactorStorage, PivotedCholesky, pivoted_cholesky, run_pivoted_cholesky,
)
from .models.cme import CME
from .models.conditional_model import ConditionalModel
from .models.degeneracy import DegeneracyWarning, GridBudgetWarning
from .models.estimator import Estimator, UnsupportedQuery
from .models.protocol import NotFittedError
from .models.greedy import ClassBasis, GreedyJDL
from .models.jdl import JDL
from .models.klr import KLR
from .models.polynomial import PolynomialJDL
from .models.polynomial_basis import PolynomialBasis
from .models.problem import JDLProblem, build_problem
from .models.psd_jdl import PSDJDL
from .models.registry import METHODS, estimator_class
from .psd.conditional_fit import conditional_loss, fit_psd_conditional, tune_psd_conditional
from .psd.fit import fit_psd_density
from .psd.filter import PSDFilter
from .psd.model import GaussianPSDModel
from .tuning import TunedModel, TuneOptions, TuneResult, tune

__version__ = "0.1.0"

__all__ = [
    "GaussianKernel", "LaplaceKernel", "Matern32Kernel", "Matern52Kernel", "DeltaKernel", "Kernel",
    "kernel_from_dict", "median_heuristic", "pivoted_cholesky", "run_pivoted_cholesky", "PivotedCholesky",
    "Factorisation", "FactorStorage", "InMemoryFactorStorage", "JDL", "JDLProblem", "build_problem", "JDLReductions",
    "SpectralBasis", "spectral_basis", "tune", "TuneOptions", "TuneResult", "SecondMomentLoss", "ClippedLogisticLoss",
    "relative_second_moment_loss", "clipped_logistic_loss", "CME", "KLR", "PolynomialJDL", "PolynomialBasis",
    "GreedyJDL", "ClassBasis", "GaussianPSDModel", "PSDFilter", "fit_psd_density", "fit_psd_conditional",
    "conditional_loss", "tune_psd_conditional",
    "PSDJDL", "amcmd", "jmmd",
    "compress",
    "run_compression", "DegeneracyWarning", "GridBudgetWarning", "METHODS", "estimator_class", "Estimator",
    "NotFittedError", "UnsupportedQuery", "ConditionalModel", "TunedModel",
]
