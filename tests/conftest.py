"""Shared fixtures: every operator test body runs on every backend present."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import gpuwm

#: plan fixtures are query code tests/test_plans.py runs with its views in scope, not modules to import
collect_ignore_glob = ["plans/*"]

settings.register_profile(
    "gpuwm",
    deadline=None,
    # CI: ~3 of ~42 min at 30 (~4 at 40, ~6 at 60, 9.5 at 100); GPUWM_HYPOTHESIS_EXAMPLES=200 or more by hand
    max_examples=int(os.environ.get("GPUWM_HYPOTHESIS_EXAMPLES", "30")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=bool(os.environ.get("CI")),
)
settings.load_profile("gpuwm")

_HAS_GPU = gpuwm.gpu_available()


class HostGpu(gpuwm.backend.Backend):
    """A "GPU" backend on NumPy: every ``is_gpu`` branch of gpuwm (Frames,
    explicit host<->device copies, packed validity bits) runs in CI, on the
    shared kernels; what it cannot check is CuPy itself."""

    def to_numpy(self, a):
        return np.asarray(a)

    # pinned staging (gpuwm.staging): copies, as the GPU's, so that no
    # device view aliases the Arrow input or a reused pinned buffer
    def empty_pinned(self, nbytes):
        return np.full(nbytes, 0xA5, dtype=np.uint8)  # garbage, as fresh memory is: a byte never written shows

    def upload(self, host):
        return np.array(host, copy=True), None

    def download(self, dev, host):
        host[...] = dev

    def wait(self, event):
        pass


_np_searchsorted = np.searchsorted


def _cupy_like_searchsorted(a, v, side="left", sorter=None):
    """``numpy.searchsorted`` refusing what ``cupy.searchsorted`` refuses: a
    NumPy scalar ``v`` ("Only python scalars or ndarrays are supported for
    v"). The ``gpu-sim`` backends run with it, so that a kernel passing
    ``np.int64(w)`` fails here and not first on a GPU."""
    if not isinstance(a, np.ndarray):
        raise NotImplementedError("Only int or ndarray are supported for a")
    if not isinstance(v, np.ndarray) and (isinstance(v, np.generic) or not isinstance(v, int | float | complex)):
        raise NotImplementedError("Only python scalars or ndarrays are supported for v")
    return _np_searchsorted(a, v, side=side, sorter=sorter)


class _CupyLikeUfunc:
    """A NumPy ufunc as CuPy has it: ``accumulate`` and ``reduceat`` exist
    for ``add`` alone (cupy/cupy#7082; CuPy raises NotImplementedError).
    Refused only when gpuwm's or the kernels' code asks, so NumPy's other
    users (pandas, hypothesis) keep the real ufunc. A kernel calling
    ``xp.maximum.accumulate`` then fails under ``gpu-sim`` in CI, not first
    on a GPU (Top-N's rank did, on an H200)."""

    def __init__(self, uf):
        self._uf = uf

    def __call__(self, *a, **k):
        return self._uf(*a, **k)

    def __getattr__(self, name):
        if name in ("accumulate", "reduceat"):
            caller = sys._getframe(1).f_globals.get("__name__", "").split(".")[0]
            if caller in ("gpuwm", "kernels"):
                raise NotImplementedError(f"CuPy has no {self._uf.__name__}.{name} (add alone has it)")
        return getattr(self._uf, name)


def pytest_configure(config):
    """The suite's JVMs set for short runs (``tests/jvm.py``), once, before
    xdist's workers start (they inherit ``PYSPARK_SUBMIT_ARGS``)."""
    if not hasattr(config, "workerinput"):
        from .jvm import prepare

        config._gpuwm_jvm = prepare(archive=os.environ.get("GPUWM_TEST_JVM") != "c1")


def pytest_unconfigure(config):
    from .jvm import finish

    finish(getattr(config, "_gpuwm_jvm", None))


def pytest_collection_modifyitems(items):
    """The longest files first, so that two workers end together (xdist
    hands whole files out in this order: ``--no-loadscope-reorder``, not
    its default of the most tests first, which leaves the few long Spark
    tests for the end): the version smoke of the other Spark lines
    (``tests/test_lines.py``, on one worker beside the rest of the suite),
    then the files by how many of their tests start or use Spark (a
    session, a broker, a subprocess: ~10-100 s each, against milliseconds
    for the rest)."""
    from collections import Counter

    def path(item):
        return item.nodeid.split("::")[0]

    uses = {"spark", "broker", "s3"}
    spark = Counter(path(i) for i in items if i.get_closest_marker("spark") or uses & set(i.fixturenames))
    items.sort(key=lambda i: (path(i) != "tests/test_lines.py", -spark[path(i)]))


@pytest.fixture(
    params=[
        "cpu",
        "gpu-sim",
        "gpu-sim-cudf",
        pytest.param("gpu", marks=[pytest.mark.gpu,
                                   pytest.mark.skipif(not _HAS_GPU, reason="no usable GPU (cupy)")]),
    ]
)
def backend(request, monkeypatch) -> str:
    """The backend name an operator is built with: ``backend=backend``.
    ``gpu-sim`` builds operators with ``backend="gpu"`` on :class:`HostGpu`
    (CuPy alone); ``gpu-sim-cudf`` adds :mod:`tests.fake_cudf`, so string
    columns take gpuwm's cuDF branches."""
    if request.param.startswith("gpu-sim"):
        from . import fake_cudf

        cudf = fake_cudf if request.param == "gpu-sim-cudf" else None
        monkeypatch.setattr(gpuwm.backend, "gpu_available", lambda: True)
        monkeypatch.setattr(gpuwm.backend, "_gpu_backend", lambda: HostGpu("gpu", np, cudf))
        # and the kernels' CuPy-side shims (running max by doubling, per-run min/max by scatter)
        monkeypatch.setattr("kernels.xp.CUPY_BRANCHES", True)
        # and CuPy's narrower argument types, as seen on a GPU (CuPy 14)
        monkeypatch.setattr(np, "searchsorted", _cupy_like_searchsorted)
        for name in ("maximum", "minimum", "multiply", "logical_or", "logical_and"):
            monkeypatch.setattr(np, name, _CupyLikeUfunc(getattr(np, name)))
        return "gpu"
    return request.param


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A one-node KRaft Kafka broker on loopback (``tests/kafka_broker.py``,
    jars from Maven Central), one per test module that asks for it; a
    broker that cannot start fails the test with the reason."""
    from gpuwm.errors import GpuwmError

    from .kafka_broker import Broker

    try:
        b = Broker(str(tmp_path_factory.mktemp("kafka"))).start()
    except GpuwmError as e:  # Maven Central out of reach, or the broker did not start: say which
        pytest.fail(f"the Kafka broker could not be started: {e}")
    yield b
    b.stop()
