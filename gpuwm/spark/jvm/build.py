"""gpuwm's own JVM classes, compiled at first use against the running PySpark.

* ``scala/GpuwmState.scala`` — the pass-through ``StateStoreWriter`` node
  that puts gpuwm's stateful stages in Spark's progress
  (:mod:`gpuwm.spark.driver.state_ops`).

The source is this project's; the Scala compiler is the one PySpark ships
(``pyspark/jars/scala-compiler-*.jar``, for its REPL), so nothing is
fetched and nothing binary is committed. A jar is built once per PySpark
version and source (~11 s on two cores) into
``~/.cache/gpuwm/jvm/gpuwm-state-<spark>-<hash>.jar``, written to a
temporary name and renamed (two processes may build it at once), and
loaded into a running driver JVM by a class loader of its own over
Spark's (:func:`load`): a user's session needs no ``spark.jars``. Tasks
never see these classes: the node runs on the driver only (its
``execute`` is its child's).
"""

from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import tempfile
import threading
from pathlib import Path

from ...errors import GpuwmError
from . import versions

SOURCE = Path(__file__).with_name("scala") / "GpuwmState.scala"


def _pyspark_jars() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "jars")


def source_text() -> str:
    """The Scala source for the running line: ``STATEFUL`` the package of
    its stateful operator traits, ``STORE_NAMES`` its commit-validation
    member (:func:`versions.stateful_package`)."""
    pkg, store_names = versions.stateful_package()
    text = SOURCE.read_text()
    return text.replace("STATEFUL", pkg).replace(
        "STORE_NAMES", "override val stateStoreNames: Seq[String] = Nil" if store_names else "")


def state_jar() -> str:
    """The path of the compiled jar for the running PySpark, built when not
    there yet. Raises :class:`GpuwmError` with the compiler's output when
    the build fails."""
    text = source_text()
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    out = Path.home() / ".cache" / "gpuwm" / "jvm" / f"gpuwm-state-{versions.text(versions.running())}-{key}.jar"
    if out.exists():
        return str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    jars = _pyspark_jars()
    if not glob.glob(os.path.join(jars, "scala-compiler-*.jar")):
        raise GpuwmError(f"PySpark's Scala compiler (scala-compiler-*.jar) is not in {jars}: gpuwm builds its "
                         f"state node with it")
    with tempfile.TemporaryDirectory(prefix="gpuwm-jvm-") as tmp:
        src = os.path.join(tmp, "GpuwmState.scala")
        Path(src).write_text(text)
        jar = os.path.join(tmp, "out.jar")
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
        p = subprocess.run([java, "-cp", os.path.join(jars, "*"), "scala.tools.nsc.Main", "-usejavacp",
                            "-nowarn", "-d", jar, src], capture_output=True, text=True, timeout=600)
        if p.returncode != 0 or not os.path.exists(jar):
            raise GpuwmError(f"gpuwm could not compile its state node against PySpark "
                             f"{versions.text(versions.running())}: {(p.stdout + p.stderr).strip()[-2000:]}")
        part = f"{out}.{os.getpid()}.part"
        os.replace(jar, part)
        os.replace(part, out)
    return str(out)


_LOADED: dict[int, object] = {}
_LOCK = threading.Lock()


def load(spark):
    """``GpuwmStrategy`` (the Scala object) in ``spark``'s driver JVM: its
    jar (:func:`state_jar`) loaded once per JVM by a class loader whose
    parent is Spark's (under a lock: queries started side by side, as
    ``gpuwm demo``'s, must share one loader, or one's strategy would not
    know the other's nodes)."""
    gateway = spark.sparkContext._gateway
    with _LOCK:
        got = _LOADED.get(id(gateway))
        return _load(spark, gateway) if got is None else got


def _load(spark, gateway):
    jvm = spark._jvm
    urls = gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = jvm.java.io.File(state_jar()).toURI().toURL()
    loader = jvm.java.net.URLClassLoader(urls, jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader())
    got = loader.loadClass("gpuwm.spark.GpuwmStrategy$").getField("MODULE$").get(None)
    _LOADED[id(gateway)] = got
    return got


def loaded(spark):
    """``GpuwmStrategy`` where :func:`load` loaded it into ``spark``'s JVM, else None."""
    return _LOADED.get(id(spark.sparkContext._gateway))
