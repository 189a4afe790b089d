"""The driver's side of a running query: the checkpoint made ready before
Spark starts, then each micro-batch (``loop``: its job, its commit, its
report), the batches without new data (``drain``), and what a batch's tasks
read directly — files and Nexmark (``direct``), Kafka ranges and the select
translated from Spark's plan (``kafka``).

May import: ``executor``, ``io``, ``storage``, ``jvm``; gpuwm's core.
Nothing of the front. See README.md beside this file.
"""
