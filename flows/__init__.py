"""flows: jdl's runs over ``pipeline``: the stages as plain functions (``stages``), the flows that chain
them (``pipelines``), run in this process or, with the ``flows`` extra, as recorded Prefect flows
(``jdl_flows``, ``runner``), and ``jdl serve`` (``serve``). The command line is ``jdl.cli``."""
import jdlcore  # noqa: F401  (first: it sets OpenBLAS's idle-thread wait before NumPy loads)
