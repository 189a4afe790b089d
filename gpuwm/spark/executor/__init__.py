"""What Spark's tasks run for a micro-batch: the batch's plan (one frozen,
picklable value made on the driver), the task functions (filter, vnodes,
segments, a single task), the exchange of rows between stages through the
storage seam, and the GPU a task uses.

Knows operator specs and their capabilities (the stage registry), never an
operator module. May import: ``io``, ``storage``; gpuwm's core. Nothing of
the driver or the front. See README.md beside this file.
"""
