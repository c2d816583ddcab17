"""flows: the ``jdl`` command line and (with the ``flows`` extra) the Prefect flows over ``pipeline``."""
import jdlcore  # noqa: F401  (first: it sets OpenBLAS's idle-thread wait before NumPy loads)
