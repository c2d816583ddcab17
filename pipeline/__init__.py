"""pipeline: out-of-core staging, chunked (Dask) factorisation and reductions, the tuning fan-out, the
model store, batch scoring, compression, and each stage's settings (``settings``). Feeds the
mathematics of ``jdlcore``; holds none of its own."""
import jdlcore  # noqa: F401  (first: it sets OpenBLAS's idle-thread wait before NumPy loads)
