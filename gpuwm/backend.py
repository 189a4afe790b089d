"""Backend choice: which array module the operators run on.

``auto`` (default) uses the GPU when CuPy finds one and falls back to the CPU
with one logged warning; ``gpu`` raises :class:`BackendError` when no GPU is
usable; ``cpu`` always runs NumPy/PyArrow. Set it with
:func:`set_backend` or the ``GPUWM_BACKEND`` environment variable. CuPy is
imported only here, inside functions, so CPU machines and the Spark driver
import gpuwm without CUDA.

The GPU backend needs CuPy only. Where cuDF is installed it is used too
(``Backend.cudf``): string columns then move to the device through
``cudf.Index.from_arrow`` and are gathered, filtered, concatenated and
dictionary-coded there, instead of staying host Arrow arrays (other
non-fixed-width columns stay on the host). ``GPUWM_CUDF=0`` turns that off.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import BackendError, ConfigError

log = logging.getLogger("gpuwm")

_CHOICES = ("auto", "cpu", "gpu")
_choice: str | None = None
_warned = False


@dataclass(frozen=True)
class Backend:
    """An array module and how to cross the host/device boundary."""

    name: str  #: "cpu" or "gpu"
    xp: Any  #: numpy or cupy
    cudf: Any = None  #: the cudf module, on a GPU backend where it is installed (else None)

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"

    def asarray(self, host: np.ndarray) -> Any:
        """Host -> device (a no-op on the CPU backend)."""
        return host if not self.is_gpu else self.xp.asarray(host)

    def to_numpy(self, a: Any) -> np.ndarray:
        """Device -> host (a no-op on the CPU backend)."""
        return a if not self.is_gpu else self.xp.asnumpy(a)

    # -- pinned staging (gpuwm.staging lays the bytes out; these move them) --
    def empty_pinned(self, nbytes: int) -> np.ndarray:
        """A ``uint8`` host array of ``nbytes`` in page-locked memory (from
        CuPy's pinned pool; plain memory on the CPU backend)."""
        if not self.is_gpu:
            return np.empty(nbytes, dtype=np.uint8)
        import cupyx

        return cupyx.empty_pinned((nbytes,), dtype=np.uint8)

    def upload(self, host: np.ndarray) -> tuple[Any, Any]:
        """One host->device copy of a ``uint8`` array, queued on the current
        stream (asynchronous from page-locked memory: later kernels on the
        stream run after it). Returns the device array and an event that
        completes when ``host`` may be written again (None: at once)."""
        if not self.is_gpu:
            return host, None
        cuda = self.xp.cuda
        stream = cuda.get_current_stream()
        dev = self.xp.empty(host.shape[0], dtype=np.uint8)
        dev.set(host, stream=stream)
        return dev, stream.record()

    def download(self, dev: Any, host: np.ndarray) -> None:
        """One device->host copy of a ``uint8`` array into ``host``; returns
        when it has landed (the one synchronisation of an output)."""
        if not self.is_gpu:
            host[...] = dev
            return
        stream = self.xp.cuda.get_current_stream()
        dev.get(stream=stream, out=host)
        stream.synchronize()

    def wait(self, event: Any) -> None:
        """Block until an event from :meth:`upload` has completed."""
        if event is not None:
            event.synchronize()


CPU = Backend("cpu", np)


def gpu_available() -> bool:
    """True when CuPy imports and sees a usable CUDA device."""
    try:
        import cupy
    except Exception:  # ImportError, or a broken CUDA install
        return False
    try:
        return bool(cupy.is_available())
    except Exception:
        return False


def _load_cudf() -> Any:
    """The cudf module, or None when it is not installed, does not import
    (no CUDA runtime it can use) or ``GPUWM_CUDF`` is ``0``."""
    if os.environ.get("GPUWM_CUDF", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    try:
        import cudf
    except Exception:  # ImportError, or a cuDF built for another CUDA
        return None
    return cudf


def _gpu_backend() -> Backend:
    import cupy

    return Backend("gpu", cupy, _load_cudf())


def set_backend(choice: str | None) -> None:
    """Choose ``"auto"``, ``"cpu"`` or ``"gpu"`` for operators built from now on.

    ``None`` returns to the ``GPUWM_BACKEND`` environment variable (default
    ``auto``). Existing operators keep the backend they were built with:
    their state lives there.
    """
    global _choice, _warned
    if choice is not None and choice not in _CHOICES:
        raise ConfigError(f"backend must be one of {_CHOICES}, got {choice!r}")
    _choice = choice
    _warned = False


def current_choice() -> str:
    choice = _choice or os.environ.get("GPUWM_BACKEND", "auto").strip().lower() or "auto"
    if choice not in _CHOICES:
        raise ConfigError(f"GPUWM_BACKEND must be one of {_CHOICES}, got {choice!r}")
    return choice


def get_backend(choice: str | None = None) -> Backend:
    """Resolve a choice (default: the current one) to a :class:`Backend`."""
    global _warned
    choice = choice or current_choice()
    if choice not in _CHOICES:
        raise ConfigError(f"backend must be one of {_CHOICES}, got {choice!r}")
    if choice == "cpu":
        return CPU
    if gpu_available():
        return _gpu_backend()
    if choice == "gpu":
        raise BackendError(
            "backend 'gpu' was requested but no usable GPU was found "
            "(cupy is not installed, or cupy.is_available() is False); "
            "install the 'gpu' extra on a CUDA machine or use backend 'cpu'/'auto'"
        )
    said_by = os.environ.get(SAID_BY)  # a local-mode driver said it for this machine: its workers do not repeat it
    if not _warned and (not said_by or said_by == str(os.getpid())):
        log.warning("gpuwm: no usable GPU (cupy missing or no CUDA device); backend 'auto' runs on the CPU")
    _warned = True
    return CPU


#: set by a local-mode driver (:func:`gpuwm.spark.local_session`) to its pid: its Spark workers, on the same
#: machine, inherit it and leave the "no usable GPU" line to the driver
SAID_BY = "GPUWM_BACKEND_SAID_BY"
