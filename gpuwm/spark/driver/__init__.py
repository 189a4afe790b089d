"""The driver's side of a running query: its launch on Spark from a
described plan (``launch``: the checks before anything is written, the
driver wired in, ``writeStream`` started, the SPARK-57438 Kafka restart),
the checkpoint made ready before Spark starts (``prepare``), then each micro-batch
(``loop``: its job, its commit, its report), the batches without new data
(``drain``), and what a batch's tasks read directly — files and Nexmark
(``direct``), Kafka ranges and the select on them (``kafka``; Spark's
plan read with ``catalyst``).

May import: ``executor``, ``io``, ``storage``, ``jvm``, ``catalyst``; gpuwm's core.
Nothing of the front. See README.md beside this file.
"""
