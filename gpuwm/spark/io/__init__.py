"""What a gpuwm task reads and writes itself: a micro-batch's Parquet
files, Kafka offset ranges (``kafkawire``: Kafka's protocol decoded with
NumPy), the embedded Nexmark source (also Spark's ``format("nexmark")``),
Spark's projections and ``from_json`` evaluated over Arrow (the core's
``gpuwm.project``), and the sinks (Parquet per batch and part, console rows).

May import: ``storage``, ``catalyst`` (a Nexmark stream's plan); gpuwm's core. Nothing of the executor, the driver
or the front. See README.md beside this file.
"""
