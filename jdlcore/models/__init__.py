"""The estimators (JDL and its baselines and variants), their shared contract, the method registry and the checks for degenerate fits."""
