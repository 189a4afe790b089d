"""Which GPU a Spark task uses, and sharing its memory with RAPIDS.

Order (gpuwm/DESIGN.md, "Running inside Spark"): ``CUDA_VISIBLE_DEVICES`` set by the cluster manager (then
the task's GPU is visible device 0), else the task's ``gpu`` resource
address, else (local mode) partition id modulo the device count. When RMM is
installed (RAPIDS Python workers), CuPy allocates from RMM, so gpuwm's
kernels use the pool sized by ``spark.rapids.python.memory.gpu.allocFraction``
instead of competing with it.
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

log = logging.getLogger("gpuwm")
_CONFIGURED: set[int] = set()


def choose_device(count: int, cuda_visible: str | None, task_gpus: Sequence[str] | None,
                  partition_id: int | None) -> int:
    """The CUDA device ordinal a task should use.

    >>> choose_device(4, "2", None, 7), choose_device(4, None, ["3"], 7), choose_device(4, None, None, 7)
    (0, 3, 3)
    """
    if count <= 0:
        raise ValueError("no CUDA device")
    if cuda_visible:
        return 0
    if task_gpus:
        return int(task_gpus[0]) % count
    return (partition_id or 0) % count


def use_task_gpu(backend: str) -> None:
    """Select this task's GPU (no-op for the CPU backend or without a GPU)."""
    from ...backend import gpu_available

    if backend == "cpu" or not gpu_available():
        return
    import cupy

    task_gpus, pid = None, None
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is not None:
            res = tc.resources().get("gpu")
            task_gpus = list(res.addresses) if res is not None else None
            pid = tc.partitionId()
    except ImportError:
        pass
    dev = choose_device(cupy.cuda.runtime.getDeviceCount(), os.environ.get("CUDA_VISIBLE_DEVICES"), task_gpus, pid)
    cupy.cuda.Device(dev).use()
    if dev not in _CONFIGURED:
        _CONFIGURED.add(dev)
        try:
            from rmm.allocators.cupy import rmm_cupy_allocator

            cupy.cuda.set_allocator(rmm_cupy_allocator)
            log.info("gpuwm: CuPy allocates from RMM on device %d", dev)
        except ImportError:
            pass
