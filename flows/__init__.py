"""flows: the ``jdl`` command line and (with the ``flows`` extra) the Prefect flows over ``pipeline``."""
