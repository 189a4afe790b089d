"""Reading Spark's Catalyst plans and expressions: the one home of what
gpuwm knows of Spark's analyzed and optimized plans, shared by the front
(translating a query), the driver (a batch's direct read, Kafka's
projection) and io (the Nexmark source's plan).

- ``plans`` — a node's kind, an expression's id, conjuncts, canonical
  forms, the peel down selects and filters (:func:`plans.peel`), a
  DataFrame or a Column over a plan's own nodes;
- ``expressions`` — Catalyst expressions as :mod:`gpuwm.project`'s
  (:func:`expressions.project_expr`, :func:`expressions.projection_steps`);
- ``schema`` — Spark's schema as Arrow's, and whether two write alike.

May import: ``jvm`` (py4j's objects); gpuwm's core (``gpuwm.project``).
Nothing of the front, the driver, the executor, io or storage. See
README.md beside this file.
"""
