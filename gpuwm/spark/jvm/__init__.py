"""The JVM side of gpuwm: the jars it runs with (``gpuwm jars``: Kafka's
connector, the RAPIDS Accelerator, a broker and S3 server for the tests),
the driver JVM's start kept off the terminal, Spark's JVM objects read
through py4j, and the patch to Spark's Python worker that cuts its per-task
import cost.

May import: gpuwm's core (``gpuwm.errors``); no other room of
``gpuwm.spark``. See README.md beside this file.
"""
