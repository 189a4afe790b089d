"""spark-submit entry point: ``spark-submit [--properties-file spark_conf/...] gpuwm/spark/app.py SPEC.json [SPEC.json ...]``.

Runs the pipeline each JSON spec describes (see :mod:`gpuwm.spark.front.spec`),
one after another, in the SparkSession spark-submit configured. Every spec
is read and checked before the first runs.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: spark-submit gpuwm/spark/app.py SPEC.json [SPEC.json ...]", file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    # run as a script, Python put this file's directory first on the path: its rooms
    # (io/, jvm/, ...) are gpuwm.spark's subpackages, not top-level packages
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(here)))
    from pyspark.sql import SparkSession

    from gpuwm.spark.front.session import register_sources
    from gpuwm.spark.front.spec import load_spec, run

    specs = [load_spec(a) for a in argv]
    spark = SparkSession.builder.appName("gpuwm").getOrCreate()
    try:
        register_sources(spark)
        from gpuwm.spark.front.cli import summary

        for spec in specs:
            p = run(spark, spec)
            if p.history:
                print("\n".join(summary(p.history[-1])), flush=True)
    finally:  # a cluster manager sees the application end, not its driver vanish
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
