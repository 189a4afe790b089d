"""The storage seam: every path gpuwm reads or writes under a checkpoint,
on any file system (``checkpoint``: locations, the lease, commits, drains,
exchange pieces), and the operators' versioned state (``store``).

May import: gpuwm's core (errors, frames, partitions); no other room of
``gpuwm.spark`` (pyspark only for a task's attempt number). See README.md beside this file.
"""
