"""Shared fixtures: every operator test body runs on every backend present."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import gpuwm

settings.register_profile(
    "gpuwm",
    deadline=None,
    max_examples=int(os.environ.get("GPUWM_HYPOTHESIS_EXAMPLES", "120")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=bool(os.environ.get("CI")),
)
settings.load_profile("gpuwm")

_HAS_GPU = gpuwm.gpu_available()


@pytest.fixture(
    params=[
        "cpu",
        pytest.param("gpu", marks=[pytest.mark.gpu,
                                   pytest.mark.skipif(not _HAS_GPU, reason="no usable GPU (cupy)")]),
    ]
)
def backend(request) -> str:
    """The backend name an operator is built with: ``backend=backend``."""
    return request.param
