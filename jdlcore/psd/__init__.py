"""PSD models (Rudi & Ciliberto): non-negative Gaussian PSD densities, their closed-form operations and their fit."""
