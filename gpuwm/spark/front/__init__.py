"""What a user calls: ``accelerate`` / ``explain`` (a PySpark or Spark SQL
query translated from Spark's analyzed plan, ``translate``), the
``Pipeline`` builder over the stage registry (``pipeline``), the JSON spec
(``spec``), the ``gpuwm`` command (``cli``) and the session
(``session``: ``local_session``, ``read_nexmark``).

May import: every other room. Nothing below imports it. See README.md
beside this file.
"""
