"""The JVM parts gpuwm runs with, fetched from Maven Central: ``gpuwm jars``.

* :data:`KAFKA` — Spark's Kafka connector, for ``"format": "kafka"`` sources
  (``gpuwm run`` adds it to ``spark.jars.packages`` itself; with
  ``spark-submit`` pass ``--packages`` with it);
* :data:`RAPIDS` — the RAPIDS Accelerator, one self-contained jar (~1 GB,
  every Spark shim), fetched as it is by :func:`fetch_jar` (its parent POM is
  not on Maven Central, so ``spark.jars.packages`` cannot resolve it): pass
  ``--jars "$(gpuwm jars --rapids-path)"`` to ``spark-submit``;
* :data:`BROKER` — an Apache Kafka broker (KRaft), which the tests and
  ``benchmarks/bench_kafka.py`` start on loopback;
* :func:`hadoop_aws` — Hadoop's S3A file system for Spark's own checkpoint
  and files on S3 (the version of PySpark's Hadoop client);
* :data:`S3PROXY` — an S3-compatible server the tests start on loopback,
  one self-contained jar (:func:`fetch_jar`: no dependency resolution).

The others are resolved with their dependencies by the Ivy that PySpark ships
(``pyspark/jars/ivy-*.jar``; only Java is needed), with a resolver named as
Spark's own (``central``) into Spark's Ivy cache (``~/.ivy2.5.2/cache``), so a
later ``spark.jars.packages`` of the same coordinates finds them there and
downloads nothing.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import tempfile
import time

from ...errors import ConfigError, GpuwmError
from . import versions


def _for_running(pick) -> str | None:
    """``pick()``'s coordinate for the running Spark (:mod:`.versions`), or None where it has none."""
    try:
        return pick()
    except ConfigError:
        return None


#: Spark's Kafka connector, the RAPIDS Accelerator and Delta Lake (what a session needs to read and write
#: ``format("delta")``) for the running Spark (:mod:`.versions`; None: that Spark has none)
KAFKA = _for_running(versions.kafka_connector)
RAPIDS = _for_running(versions.rapids)
DELTA = _for_running(versions.delta)
BROKER = "org.apache.kafka:kafka_2.13:4.1.1"
S3PROXY = "org.gaul:s3proxy:4.1.0:jar-with-dependencies"
CENTRAL = "https://repo1.maven.org/maven2/"


def hadoop_version() -> str:
    """The Hadoop client version PySpark ships (``hadoop-client-api-<v>.jar``)."""
    import pyspark

    found = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))
    if not found:
        raise ConfigError("PySpark's Hadoop client jar (pyspark/jars/hadoop-client-api-*.jar) is missing")
    return os.path.basename(found[0]).removeprefix("hadoop-client-api-").removesuffix(".jar")


def hadoop_aws() -> str:
    """``org.apache.hadoop:hadoop-aws`` of PySpark's Hadoop version: Spark's
    ``s3a://`` file system (``spark.jars.packages``)."""
    return f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"


def jar_cache() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "gpuwm", "jars")


def fetch_jar(coordinate: str, timeout: float = 600) -> str:
    """The local path of one self-contained jar, ``group:artifact:version``
    or ``group:artifact:version:classifier``, downloaded from Maven Central
    as it is (no POM, no dependencies) into :func:`jar_cache` when not there
    yet, and checked against the registry's ``.sha1``. Raises
    :class:`GpuwmError` saying why when it cannot."""
    import hashlib
    import urllib.request

    parts = coordinate.split(":")
    if len(parts) not in (3, 4) or not all(parts):
        raise ConfigError(f"a jar is group:artifact:version[:classifier], got {coordinate!r}")
    group, artifact, version = parts[:3]
    name = f"{artifact}-{version}" + (f"-{parts[3]}" if len(parts) == 4 else "") + ".jar"
    url = f"{CENTRAL}{group.replace('.', '/')}/{artifact}/{version}/{name}"
    path = os.path.join(jar_cache(), name)
    if os.path.exists(path) and os.path.exists(path + ".sha1"):
        return path
    os.makedirs(jar_cache(), exist_ok=True)
    try:
        with urllib.request.urlopen(url + ".sha1", timeout=60) as r:
            want = r.read().decode().split()[0].strip().lower()
        tmp = f"{path}.tmp-{os.getpid()}"
        h = hashlib.sha1()
        with urllib.request.urlopen(url, timeout=timeout) as r, open(tmp, "wb") as fh:
            while chunk := r.read(1 << 20):
                h.update(chunk)
                fh.write(chunk)
    except OSError as e:
        raise GpuwmError(f"could not fetch {coordinate} from {url}: {e}") from None
    if h.hexdigest() != want:
        os.remove(tmp)
        raise GpuwmError(f"{url}: sha1 {h.hexdigest()} differs from the registry's {want}; not used")
    os.replace(tmp, path)
    with open(path + ".sha1", "w") as fh:
        fh.write(want)
    return path

_SETTINGS = f"""<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers><ibiblio name="central" m2compatible="true" root="{CENTRAL}"/></resolvers>
</ivysettings>
"""


def ivy_cache() -> str:
    """Spark's Ivy cache (``spark.jars.ivy`` left at its default)."""
    return os.path.join(os.path.expanduser("~"), ".ivy2.5.2", "cache")


def _ivy_jar() -> str:
    import pyspark

    found = sorted(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "ivy-*.jar")))
    if not found:
        raise ConfigError("PySpark's Ivy jar (pyspark/jars/ivy-*.jar) is missing: reinstall pyspark")
    return found[-1]


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home and os.path.exists(os.path.join(home, "bin", "java")) \
        else shutil.which("java")
    if not java:
        raise ConfigError("no java on PATH (and no JAVA_HOME): Java 17 is needed to fetch jars and run Spark")
    return java


def store_certificates(path: str, kind: str, password: str | None) -> str:
    """The certificates of a Java key store (``kind`` JKS or PKCS12: a
    Kafka client's trust store) in PEM, read by the JDK's ``keytool`` beside
    :func:`_java`; cached by the file's path, size and time."""
    st = os.stat(path)  # (not there: the OSError says so)
    return _store_certificates(os.path.abspath(path), st.st_size, st.st_mtime_ns, kind.upper(), password)


@functools.lru_cache(maxsize=16)
def _store_certificates(path: str, size: int, mtime: int, kind: str, password: str | None) -> str:
    import re

    keytool = os.path.join(os.path.dirname(os.path.realpath(_java())), "keytool")
    cmd = [keytool, "-list", "-rfc", "-keystore", path, "-storetype", kind]
    r = subprocess.run(cmd + (["-storepass", password] if password is not None else []), capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, timeout=60)
    pem = re.findall(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", r.stdout, re.S)
    if r.returncode or not pem:
        why = (r.stderr.strip() or r.stdout.strip()).splitlines()
        raise ConfigError(f"the {kind} store {path} gave no certificate to keytool: "
                          f"{why[-1] if why else f'exit status {r.returncode}'}")
    return "\n".join(pem) + "\n"


def resolve(coordinate: str, timeout: float = 1800) -> list[str]:
    """The local paths of ``group:artifact:version`` and its runtime
    dependencies, fetched from Maven Central into :func:`ivy_cache` when not
    there yet. Raises :class:`GpuwmError` with Ivy's reason when it cannot."""
    parts = coordinate.split(":")
    if len(parts) != 3 or not all(parts):
        raise ConfigError(f"a Maven coordinate is group:artifact:version, got {coordinate!r}")
    with tempfile.TemporaryDirectory(prefix="gpuwm-ivy-") as tmp:
        settings, cp = os.path.join(tmp, "ivysettings.xml"), os.path.join(tmp, "classpath")
        with open(settings, "w") as fh:
            fh.write(_SETTINGS)
        cmd = [_java(), "-jar", _ivy_jar(), "-settings", settings, "-cache", ivy_cache(),
               "-dependency", *parts, "-confs", "default", "-cachepath", cp]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if p.returncode or not os.path.exists(cp):
            why = [ln.strip() for ln in (p.stdout + p.stderr).splitlines()
                   if "UNRESOLVED" in ln or "unresolved" in ln or "FAILED" in ln or "not found" in ln]
            raise GpuwmError(f"could not fetch {coordinate} from {CENTRAL}: "
                              f"{'; '.join(why[:3]) or (p.stdout + p.stderr).strip()[-300:]}")
        with open(cp) as fh:
            return [j for j in fh.read().strip().split(os.pathsep) if j]


def spec_packages(sources: list[dict]) -> list[str]:
    """The ``spark.jars.packages`` a spec's sources need."""
    return [versions.kafka_connector()] if any(isinstance(s, dict) and s.get("format") == "kafka" for s in sources) else []


def rapids_jar() -> str:
    """The local path of the RAPIDS Accelerator jar (:data:`RAPIDS`), fetched when not cached."""
    return fetch_jar(versions.rapids())


def fetch(rapids: bool = True, broker: bool = True, out=print) -> dict[str, list[str]]:
    """``gpuwm jars``: fetch the Kafka connector, the test broker and the
    RAPIDS jar; a line each with its size and time."""
    wanted = [("Kafka connector", versions.kafka_connector())] + ([("Kafka broker", BROKER)] if broker else []) \
        + ([("RAPIDS Accelerator", versions.rapids())] if rapids else [])
    got = {}
    for what, coord in wanted:
        t0 = time.perf_counter()
        jars = [rapids_jar()] if what == "RAPIDS Accelerator" else resolve(coord)
        size = sum(os.path.getsize(j) for j in jars)
        out(f"{what:<19} {coord:<50} {len(jars):3d} jar(s) {size / 2**20:8.1f} MiB  {time.perf_counter() - t0:6.1f} s")
        got[coord] = jars
    out(f"cached under {ivy_cache()} (spark.jars.packages finds them there)"
        + (f" and {jar_cache()} (the RAPIDS jar: spark-submit --jars)" if rapids else ""))
    return got
