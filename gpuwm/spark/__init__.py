"""gpuwm on Spark Structured Streaming (imports pyspark; the rest of gpuwm does not).

The public names, each imported from its room on first use:
``accelerate`` / ``explain`` (a PySpark or Spark SQL streaming query run by
gpuwm, :mod:`gpuwm.spark.front.accelerate`), ``Pipeline`` (the builder,
:mod:`gpuwm.spark.front.pipeline`), ``local_session`` (a local SparkSession
set up for gpuwm), ``read_nexmark`` (the embedded source) and
``register_sources`` (:mod:`gpuwm.spark.front.session`).

The rooms, each importing only those below it (``tests/test_layers.py``
holds the arrows)::

    front/     what a user calls: accelerate, plan translation (a rule per node), the builder, the spec, the CLI
    driver/    the driver's side of a running query: its launch, the per-batch loop, drains, direct-read planning
    executor/  what Spark's tasks run: the batch's plan, the task functions, the exchange, the task's GPU
    io/        what a task reads and writes: files, Kafka, Nexmark, the projection evaluator, the sinks
    storage/   the checkpoint (the storage seam) and versioned operator state
    catalyst/  reading Spark's plans and expressions (front, driver and io share it)
    jvm/       the JVM side: jars, the JVM's start, py4j objects, the Python worker's patch

``app.py`` is spark-submit's entry point. Each room's README says what it
owns; the reference pages are linked from the project's README.
"""

from __future__ import annotations

import sys

__all__ = ["Pipeline", "accelerate", "explain", "local_session", "read_nexmark", "register_sources"]

#: public name -> the module that defines it (no public name is a submodule's name)
_LAZY = {"accelerate": ".front.accelerate", "explain": ".front.accelerate", "Pipeline": ".front.pipeline",
         "local_session": ".front.session", "read_nexmark": ".front.session",
         "register_sources": ".front.session"}

if "pyspark.worker" not in sys.modules:  # (the driver: a Spark line gpuwm does not support said once, here)
    from .jvm.versions import unsupported as _unsupported

    if _unsupported() is not None:
        print(f"gpuwm: warning: {_unsupported()}; accelerate() leaves every query to Spark", file=sys.stderr)

if "pyspark.worker" in sys.modules:  # imported in Spark's Python worker, by a task: its per-task import cost cut
    from .jvm.pyworker import cached_zip_directories

    cached_zip_directories()


def __getattr__(name: str):
    """A public name on first use: a Spark Python worker that needs one
    small module (a task's reader) does not import the builder and every
    operator with it."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
