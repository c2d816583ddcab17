import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def bivariate_gaussian(n: int, rho: float = 0.8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(seed)
    x = generator.standard_normal(n)
    y = rho * x + np.sqrt(1 - rho**2) * generator.standard_normal(n)
    return x[:, None], y[:, None]
