"""A real S3-compatible server on loopback for the tests: S3Proxy
(:data:`gpuwm.spark.jvm.jars.S3PROXY`, one jar from Maven Central) over its
``filesystem-nio2`` backend, a bucket per directory. Spark reaches it
through Hadoop's S3A (:func:`gpuwm.spark.jvm.jars.hadoop_aws`), gpuwm through
``pyarrow.fs.S3FileSystem`` — both from the same ``spark.hadoop.fs.s3a.*``
settings (:meth:`S3Server.spark_conf`)."""

from __future__ import annotations

import os
import subprocess

from gpuwm.spark.jvm.jars import S3PROXY, _java, fetch_jar, hadoop_aws, resolve

from .loopback import LoopbackServer, free_port

KEY, SECRET = "gpuwm-test", "gpuwm-test-secret"


class S3Server(LoopbackServer):
    """``with S3Server(dir) as s3:`` — S3 at ``s3.endpoint`` with bucket
    ``s3.bucket``, its objects as files under ``dir/data``."""

    what = "S3Proxy"

    def __init__(self, workdir: str, bucket: str = "gpuwm"):
        self.dir, self.bucket = str(workdir), bucket
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> "S3Server":
        data = os.path.join(self.dir, "data")
        os.makedirs(os.path.join(data, self.bucket), exist_ok=True)
        props = os.path.join(self.dir, "s3proxy.conf")
        with open(props, "w") as fh:
            fh.write("\n".join([
                f"s3proxy.endpoint={self.endpoint}", "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={KEY}", f"s3proxy.credential={SECRET}", "s3proxy.ignore-unknown-headers=true",
                "jclouds.provider=filesystem-nio2", f"jclouds.filesystem.basedir={data}",
                f"jclouds.identity={KEY}", f"jclouds.credential={SECRET}", ""]))
        self._log = open(os.path.join(self.dir, "s3proxy.log"), "w")
        self.proc = subprocess.Popen([_java(), "-Xmx256m", "-jar", fetch_jar(S3PROXY), "--properties", props],
                                     stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready(lambda: self.fs().get_file_info(self.bucket), timeout, 0.3)
        return self

    def stop(self, grace: float = 20) -> None:
        super().stop(grace)

    def uri(self, key: str) -> str:
        return f"s3a://{self.bucket}/{key}"

    def spark_conf(self, **overrides: str) -> dict[str, str]:
        """Spark's settings for this server (gpuwm takes the same ones)."""
        conf = {"spark.hadoop.fs.s3a.endpoint": self.endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.access.key": KEY, "spark.hadoop.fs.s3a.secret.key": SECRET,
                "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
                "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
        conf.update(overrides)
        return conf

    def options(self, **overrides: str) -> tuple[tuple[str, str], ...]:
        """The same as gpuwm's file-system options (:func:`~gpuwm.spark.storage.checkpoint.spark_fs_options`)."""
        return tuple(sorted((k.removeprefix("spark.hadoop."), v) for k, v in self.spark_conf(**overrides).items()))

    def fs(self):
        from gpuwm.spark.storage.checkpoint import Location

        return Location.of(self.uri(""), self.options()).fs

    def keys(self, prefix: str = "") -> list[str]:
        """Every object under ``prefix`` in the bucket."""
        from gpuwm.spark.storage.checkpoint import Location

        loc = Location.of(self.uri(prefix), self.options())
        return sorted(i.path.removeprefix(f"{self.bucket}/") for i in loc.walk())


def spark_jars() -> str:
    """``spark.jars``: Hadoop's S3A and its AWS SDK (resolved once into Spark's Ivy cache)."""
    return ",".join(resolve(hadoop_aws()))
