"""Reproduction of the experiments of Filipovic, Multerer & Schneider, "Adaptive joint distribution learning" (Sec. 5)."""
