"""Contract of an evaluation store (``jdl evaluate``): an xarray Dataset in zarr v3 that scores a model's
conditional laws on held-out rows with a scalar y.

| variable | dims | meaning |
|---|---|---|
| crps | (sample,) | the exact CRPS of each row's law at its y (y's units) |
| pit | (sample,) | the randomised probability integral transform F(y-) + V (F(y) - F(y-)), V uniform |
| pinball | (level,) | the mean pinball loss of the law's quantile at each level |
| coverage | (nominal,) | the share of rows whose y lies in the law's central interval of that coverage |
| pit_density | (pit_bin,) | the PIT histogram as a density over [0, 1] (1 everywhere for calibrated laws) |
| crps_mean, rmse | () | the mean CRPS, and the root mean squared error of the conditional mean |

Coordinates: ``level`` and ``nominal`` in (0, 1), increasing; ``pit_bin`` the bins' centres.
Attributes: ``schema`` = "jdl.evaluation", ``schema_version``, ``model`` (the model version read),
``model_version``, ``data``, ``n_samples``, ``y_feature``, ``figure`` (the file name of the calibration
PNG, written beside the store: report.zarr -> report.png), optional ``run_key``.
"""
from __future__ import annotations

from .common import check_header, require_variables

SCHEMA_NAME = "jdl.evaluation"
SCHEMA_VERSION = 1

VARIABLE_DIMS: dict[str, tuple[str, ...]] = {
    "crps": ("sample",), "pit": ("sample",), "pinball": ("level",), "coverage": ("nominal",),
    "pit_density": ("pit_bin",), "crps_mean": (), "rmse": (),
}
REQUIRED_ATTRS = ("schema", "schema_version", "model", "data", "n_samples", "y_feature", "figure")


def validate_evaluation_dataset(ds, where: str = "evaluation") -> None:
    """Raise ``ValueError`` naming the first broken rule of the evaluation contract."""
    check_header(ds.attrs, SCHEMA_NAME, SCHEMA_VERSION, REQUIRED_ATTRS, where, "evaluation")
    require_variables(ds, VARIABLE_DIMS, where)
    if ds.sizes["sample"] != ds.attrs["n_samples"]:
        raise ValueError(f"{where}: {ds.sizes['sample']} rows, attribute n_samples says {ds.attrs['n_samples']}")
