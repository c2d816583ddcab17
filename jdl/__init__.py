"""The ``jdl`` command and its demo: the user-facing layer above the flows.

``jdl.cli`` parses the command line and runs each command through the flows (``flows``: in this
process, or as recorded Prefect flow runs); ``jdl.demo`` stages, tunes, fits and scores a synthetic
table end to end. The layers below: ``jdlcore`` (the mathematics), ``pipeline`` (Dask, zarr, the
stores, scoring and the model card) and ``flows`` (the orchestration).
"""
