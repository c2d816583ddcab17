"""The boosted summaries in a tuning or model store: the map (``jdlcore.features.summaries``) as the
variable ``data_schemas.tuning.SUMMARIES_VARIABLE``, its JSON bytes as uint8."""
from __future__ import annotations

import numpy as np
import xarray as xr

from data_schemas.tuning import SUMMARIES_DIM, SUMMARIES_VARIABLE
from jdlcore.features.summaries import BoostedSummaries

__all__ = ["summaries_variable", "read_summaries"]


def summaries_variable(summaries: BoostedSummaries) -> xr.DataArray:
    """The map as a store variable: its JSON bytes (``BoostedSummaries.to_bytes``) as uint8."""
    return xr.DataArray(np.frombuffer(summaries.to_bytes(), dtype=np.uint8), dims=SUMMARIES_DIM)


def read_summaries(ds: xr.Dataset, where: str) -> BoostedSummaries | None:
    """The map a validated tuning or model store holds (None where it has none); ``ValueError`` naming
    ``where`` for a record of another format."""
    if SUMMARIES_VARIABLE not in ds.variables:
        return None
    return BoostedSummaries.from_bytes(np.asarray(ds[SUMMARIES_VARIABLE].values).tobytes(),
                                       f"{where}: {SUMMARIES_VARIABLE}")
