"""gpu-sim that counts what a GPU would have to synchronise and copy (#17).

Arrays the backend puts "on the device" (``asarray``) are :class:`Dev`
views; NumPy keeps the subclass through ufuncs, slicing and most functions,
so everything computed from them is on the "device" too. What counts:

* ``d2h``: explicit device->host copies (``Backend.to_numpy``,
  ``kernels.xp.to_numpy`` of a device array); ``h2d``: ``Backend.asarray``;
* ``syncs``: every other point where the host waits for the device — a
  device scalar read (``int``, ``bool``, ``float``, ``item``, ``tolist``;
  reductions return 0-d device arrays as CuPy's do) and a result whose size
  depends on device data (boolean-mask indexing, ``nonzero``,
  ``flatnonzero``, ``unique``), which CuPy computes by reading a count back.

A test sets it up with :func:`install` (a monkeypatch) and reads
:data:`COUNTS`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import gpuwm


class Counts:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.syncs = self.d2h = self.h2d = 0

    def snapshot(self) -> dict:
        return {"syncs": self.syncs, "d2h": self.d2h, "h2d": self.h2d}


COUNTS = Counts()


def _host(a: Any) -> Any:
    return a.view(np.ndarray) if isinstance(a, Dev) else a


def _dev(a: Any) -> Any:
    if isinstance(a, Dev):
        return a
    if isinstance(a, np.ndarray):
        return a.view(Dev)
    if isinstance(a, (np.generic, int, float, bool)) and not isinstance(a, np.datetime64):
        return np.asarray(a).view(Dev)
    return a


class Dev(np.ndarray):
    """An array on the simulated device."""

    def _read(self) -> np.ndarray:
        COUNTS.syncs += 1
        return self.view(np.ndarray)

    def __int__(self) -> int:
        return int(self._read())

    def __float__(self) -> float:
        return float(self._read())

    def __bool__(self) -> bool:
        return bool(self._read())

    def item(self, *args: Any) -> Any:
        return self._read().item(*args)

    def tolist(self) -> Any:
        return self._read().tolist()

    def __getitem__(self, key: Any) -> Any:
        k = key if not isinstance(key, tuple) else (key[0] if key else None)
        if isinstance(k, np.ndarray) and k.dtype == bool:
            COUNTS.syncs += 1  # the output's size is the mask's count
        return _dev(np.ndarray.__getitem__(self, key))

    def __setitem__(self, key: Any, value: Any) -> None:
        k = key if not isinstance(key, tuple) else (key[0] if key else None)
        if isinstance(k, np.ndarray) and k.dtype == bool and np.ndim(value) > 0:
            COUNTS.syncs += 1  # CuPy checks the values' length against the mask's count
        np.ndarray.__setitem__(self, key, value)

    def __iter__(self):  # as CuPy: 0-d device arrays, each read a sync of its own
        return (self[i] for i in range(self.shape[0]))


for _name in ("sum", "max", "min", "any", "all", "argmax", "argmin", "mean", "prod"):
    def _reduce(self, *args, _f=getattr(np.ndarray, _name), **kw):
        return _dev(_f(self.view(np.ndarray), *args, **kw))

    setattr(Dev, _name, _reduce)


class SimXP:
    """NumPy as the device's array module: every function's arrays come back
    as :class:`Dev` (made on the device, as CuPy's are); ufuncs keep the
    subclass themselves. ``asarray`` of a host array is a host->device copy,
    ``asnumpy`` a device->host one; a result whose size depends on device
    data is a sync."""

    _SIZED = ("nonzero", "flatnonzero", "unique", "compress", "argwhere")

    def __getattr__(self, name: str) -> Any:
        attr = getattr(np, name)
        if isinstance(attr, (type, np.ufunc)) or not callable(attr):
            return attr
        sized = name in self._SIZED
        to_device = name in ("asarray", "array", "ascontiguousarray")

        def call(*args: Any, **kw: Any) -> Any:
            if sized and any(isinstance(a, Dev) for a in args):
                COUNTS.syncs += 1
            if to_device and args and not isinstance(args[0], Dev):  # host data: an array, a list, a scalar
                COUNTS.h2d += 1
            out = attr(*args, **kw)
            return tuple(_dev(o) for o in out) if isinstance(out, tuple) else _dev(out)

        return call

    def asnumpy(self, a: Any) -> np.ndarray:
        if isinstance(a, Dev):
            COUNTS.d2h += 1
        return np.array(_host(a), copy=True)


SIM_XP = SimXP()


class CountingGpu(gpuwm.backend.Backend):
    """gpu-sim's backend, counting copies."""

    def asarray(self, host: np.ndarray) -> Any:
        if isinstance(host, Dev):
            return host
        COUNTS.h2d += 1
        return np.array(host, copy=True).view(Dev)

    def to_numpy(self, a: Any) -> np.ndarray:
        if isinstance(a, Dev):
            COUNTS.d2h += 1
            return np.array(a.view(np.ndarray), copy=True)
        return np.asarray(a)

    def empty_pinned(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def upload(self, host: np.ndarray) -> tuple[Any, Any]:
        COUNTS.h2d += 1
        return np.array(host, copy=True).view(Dev), _Event()

    def download(self, dev: Any, host: np.ndarray) -> None:
        assert isinstance(dev, Dev)
        COUNTS.d2h += 1
        host[...] = dev.view(np.ndarray)

    def wait(self, event: Any) -> None:
        if event is not None:
            event.synchronize()


class _Event:
    """A staging copy's completion. Waiting on one is not counted: it is
    waited for one batch later, to reuse the pinned buffer, when the copy
    has long finished (the wait returns at once on a GPU)."""

    def synchronize(self) -> None:
        pass


def install(monkeypatch) -> None:
    """Build operators with ``backend="gpu"`` on the counting gpu-sim."""
    import kernels.xp

    from .conftest import _cupy_like_searchsorted

    monkeypatch.setattr(gpuwm.backend, "gpu_available", lambda: True)
    monkeypatch.setattr(gpuwm.backend, "_gpu_backend", lambda: CountingGpu("gpu", SIM_XP, None))
    monkeypatch.setattr("kernels.xp.CUPY_BRANCHES", True)
    monkeypatch.setattr(np, "searchsorted", _cupy_like_searchsorted)
    is_numpy, to_numpy = kernels.xp.is_numpy, kernels.xp.to_numpy

    def sim_is_numpy(xp: Any) -> bool:
        return xp is np or xp is SIM_XP

    def counted_to_numpy(xp: Any, a: Any) -> np.ndarray:
        if isinstance(a, Dev):
            COUNTS.d2h += 1
            return np.array(a.view(np.ndarray), copy=True)
        return to_numpy(np if xp is SIM_XP else xp, a)

    for name, old, new in (("is_numpy", is_numpy, sim_is_numpy), ("to_numpy", to_numpy, counted_to_numpy)):
        for mod in _modules_with(name, old):
            monkeypatch.setattr(mod, name, new)
    COUNTS.reset()


def _modules_with(name: str, obj: Any) -> list:
    import sys

    return [m for k, m in list(sys.modules.items())
            if (k.startswith("kernels") or k.startswith("gpuwm")) and getattr(m, name, None) is obj]
