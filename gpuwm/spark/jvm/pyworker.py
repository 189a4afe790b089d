"""Spark's Python worker, as gpuwm's tasks find it.

Before every task, a reused PySpark worker calls
``importlib.invalidate_caches()`` (``pyspark.worker_util.setup_spark_files``).
On Python 3.10–3.12 that makes every ``zipimporter`` on the import path —
one for ``pyspark.zip``, ``py4j-*.zip`` and the ``spark-core`` jar, and one
for each package imported from them, 16 in a worker that ran a
``mapInArrow`` — read its archive's whole directory again, eagerly
(CPython gh-103200; 3.13 reads it lazily, on the next import from it):
about 0.1 s of every task, the larger part of a small task's cost.

:func:`cached_zip_directories` makes a zipimporter read its archive again
only when the archive changed (its size or modification time), which is
what the invalidation is there to notice; an unchanged archive keeps the
directory read before. Installed once per worker process, when gpuwm's
task code is first imported there (:mod:`gpuwm.spark`).
"""

from __future__ import annotations

import os
import sys


def cached_zip_directories() -> bool:
    """Install the check in this process (once); whether it is installed
    (only where the eager re-read exists: Python 3.10 to 3.12)."""
    import zipimport

    if not (3, 10) <= sys.version_info[:2] < (3, 13):
        return False
    cls = zipimport.zipimporter
    if getattr(cls.invalidate_caches, "_gpuwm", False):
        return True
    eager = cls.invalidate_caches
    read: dict[str, tuple[int, int]] = {}  # archive -> (size, mtime) when its directory was last read

    def invalidate_caches(self) -> None:
        try:
            st = os.stat(self.archive)
            now = (st.st_size, st.st_mtime_ns)
        except OSError:
            now = None
        files = zipimport._zip_directory_cache.get(self.archive)
        if now is not None and read.get(self.archive) == now and files is not None:
            self._files = files  # the archive has not changed: its directory has not either
            return
        eager(self)
        if now is not None:
            read[self.archive] = now

    invalidate_caches._gpuwm = True  # type: ignore[attr-defined]
    invalidate_caches.__doc__ = eager.__doc__
    cls.invalidate_caches = invalidate_caches
    return True
