"""Conditional distribution compression (Broadbent, Whiteley, Allison & Lovett): the AMCMD metric,
kernel herding and inducing points (ACKIP, ACKH, JKIP, JKH), linear in n by chunked reductions."""
from .amcmd import LinearEmbedding, amcmd, amcmd_between, cme_embedding, jmmd, kcme_embedding
from .compress import LEARNING_RATE, METHODS, N_INIT, CompressionResult, compress, run_compression
from .sources import ArraySource, SampleSource

__all__ = ["METHODS", "LEARNING_RATE", "N_INIT", "CompressionResult", "compress", "run_compression", "ArraySource", "SampleSource",
           "amcmd", "jmmd", "amcmd_between", "LinearEmbedding", "kcme_embedding", "cme_embedding"]
