"""What a user calls: ``accelerate`` / ``explain`` (``accelerate``: a
PySpark or Spark SQL streaming query run by gpuwm, or by Spark as written,
with its ``writeStream``: ``writer``), the translation of Spark's analyzed
plan into gpuwm's stages (``translate``, over the rule registry
``registry`` — a rule per Catalyst node, gpuwm's in ``rules/`` — given a
``context``, making a ``translation``), the ``Pipeline`` builder over the
stage registry (``pipeline``), the JSON spec (``spec``), the ``gpuwm``
command (``cli``) and the session (``session``: ``local_session``,
``read_nexmark``).

May import: every other room. Nothing below imports it. See README.md
beside this file.
"""
