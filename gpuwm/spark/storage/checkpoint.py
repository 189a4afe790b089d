"""The storage seam: every file gpuwm reads or writes, on any file system.

A :class:`Location` is a URI as Spark takes it — a local path, ``file:``,
``s3a://bucket/key`` (also ``s3://``, ``s3n://``), ``gs://``, ``hdfs://``,
or any scheme an installed fsspec implementation serves — plus the
file-system settings Spark has for it (``spark.hadoop.fs.s3a.*``: endpoint,
path-style access, keys, region), so a user configures S3 once, for Spark
and gpuwm alike. All I/O goes through ``pyarrow.fs``; nothing relies on hard
links, directory renames or an atomic rename:

* a name that is written once per attempt (a stage's state version, an
  exchange piece) is unique to the attempt: :meth:`Location.write_unique`
  streams it out, and nothing reads it until a task has reported it whole;
* a fixed name (a commit, a sink's part, the drain request) is published
  whole or not at all (:meth:`Location.publish`): one PUT on an object
  store, a file renamed into place on a local or HDFS file system (what
  Spark's ``CheckpointFileManager`` does per file system).

:class:`Checkpoint` owns the layout of ``<checkpoint>/gpuwm/`` — state
versions, commits, exchange pieces, the pipeline, the drain request,
processing times, the owner lease — and reads Spark's own offset and commit
logs beside it. No other module builds a checkpoint path.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Iterable
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from ...errors import ConfigError, StateError

#: URI schemes served by pyarrow's S3 file system, as Hadoop names them
_S3 = ("s3a", "s3", "s3n")
_GCS = ("gs", "gcs")
#: file systems where a rename of one file is atomic: publish = write + rename
_RENAMES = ("local", "hdfs")

# one file system per (scheme, authority, settings) per process
_FS: dict[tuple, pafs.FileSystem] = {}
_FS_LOCK = threading.Lock()


def spark_fs_options(spark) -> tuple[tuple[str, str], ...]:
    """The file-system settings of Spark's Hadoop configuration
    (``spark.hadoop.fs.*``) as plain values, read once on the driver and
    passed to the tasks; ``()`` where there is no SparkContext."""
    try:
        conf = spark.sparkContext.getConf().getAll()
    except Exception:  # a stand-in session (tests), or Spark Connect
        return ()
    return tuple(sorted((k.removeprefix("spark.hadoop."), str(v)) for k, v in conf
                        if k.startswith("spark.hadoop.fs.")))


def _bool(v: str | None, default: bool) -> bool:
    return default if v is None else str(v).strip().lower() in ("true", "1", "yes")


def _seconds(v: str | None, default: float) -> float:
    """A Hadoop duration: ``"30s"``, ``"5000ms"``, ``"1m"`` or a bare number of milliseconds."""
    if v is None:
        return default
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", str(v))
    if not m:
        return default
    n, unit = float(m.group(1)), m.group(2) or "ms"
    return n * {"ms": 1e-3, "s": 1, "m": 60, "h": 3600}[unit]


def s3_options(options: dict[str, str], bucket: str) -> dict[str, Any]:
    """``pyarrow.fs.S3FileSystem`` keyword arguments from Hadoop's S3A
    settings (a per-bucket ``fs.s3a.bucket.<bucket>.<key>`` wins).

    >>> s3_options({"fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.path.style.access": "true",
    ...             "fs.s3a.access.key": "k", "fs.s3a.secret.key": "s"}, "b")["endpoint_override"]
    '127.0.0.1:9000'
    """
    def get(key: str) -> str | None:
        return options.get(f"fs.s3a.bucket.{bucket}.{key}", options.get(f"fs.s3a.{key}"))

    kw: dict[str, Any] = {}
    endpoint = get("endpoint")
    ssl = _bool(get("connection.ssl.enabled"), True)
    if endpoint:
        u = urlparse(endpoint if "://" in endpoint else f"{'https' if ssl else 'http'}://{endpoint}")
        kw["endpoint_override"] = u.netloc
        kw["scheme"] = u.scheme
        # Hadoop addresses a custom endpoint by virtual host unless path-style is set
        kw["force_virtual_addressing"] = not _bool(get("path.style.access"), False)
    for key, arg in (("access.key", "access_key"), ("secret.key", "secret_key"), ("session.token", "session_token")):
        if get(key):
            kw[arg] = get(key)
    region = get("endpoint.region") or get("region")
    if region:
        kw["region"] = region
    elif endpoint:
        kw["region"] = "us-east-1"  # a custom endpoint: no region lookup (it would ask AWS)
    if "Anonymous" in (get("aws.credentials.provider") or ""):
        kw["anonymous"] = True
    kw["connect_timeout"] = _seconds(get("connection.establish.timeout"), 10.0)
    kw["request_timeout"] = _seconds(get("connection.request.timeout"), 60.0) or 60.0
    kw["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=int(get("attempts.maximum") or 3))
    return kw


def _filesystem(scheme: str, netloc: str, options: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    key = (scheme, netloc if scheme not in _S3 + _GCS else netloc if scheme in _S3 else "", options)
    with _FS_LOCK:
        fs = _FS.get(key)
        if fs is not None:
            return fs
        opts = dict(options)
        if scheme in ("", "file"):
            fs = pafs.LocalFileSystem()
        elif scheme in _S3:
            fs = pafs.S3FileSystem(**s3_options(opts, netloc))
        elif scheme in _GCS:
            fs = pafs.GcsFileSystem()
        elif scheme in ("hdfs", "viewfs"):
            fs = pafs.HadoopFileSystem.from_uri(f"{scheme}://{netloc}")
        else:
            try:
                import fsspec
                from pyarrow.fs import FSSpecHandler, PyFileSystem

                fs = PyFileSystem(FSSpecHandler(fsspec.filesystem(scheme)))
            except (ImportError, ValueError) as e:
                raise ConfigError(f"no file system for {scheme}: URIs ({type(e).__name__}: {e}); use a local "
                                  "path, s3a://, gs://, hdfs://, or install the fsspec package that serves it")
        _FS[key] = fs
        return fs


def _not_found(e: OSError) -> bool:
    """An error that says the file is not there (pyarrow's file systems word it in several ways)."""
    msg = str(e).lower()
    return isinstance(e, FileNotFoundError) or "not found" in msg or "no such" in msg or "does not exist" in msg


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


@dataclass(frozen=True)
class Location:
    """A directory on some file system, named by ``uri``; picklable (the
    file system is made again in each process, from ``options``)."""

    uri: str
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, uri: str, options: Iterable[tuple[str, str]] = (), what: str = "path") -> "Location":
        """``uri`` checked and normalised: a local path made absolute, ``file:`` dropped."""
        if not isinstance(uri, str) or not uri.strip():
            raise ConfigError(f"{what} must be a path or URI, got {uri!r}")
        m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]+)://", uri)
        if m is None and uri.startswith("file:"):
            uri = "/" + uri.removeprefix("file:").lstrip("/")
        elif m is not None and m.group(1).lower() == "file":
            uri = "/" + uri[len(m.group(0)):].lstrip("/")
        elif m is not None:
            u = urlparse(uri)
            if u.scheme.lower() in _S3 + _GCS and not u.netloc:
                raise ConfigError(f"{what} {uri!r} names no bucket: write {u.scheme}://<bucket>/<key>")
            return cls(uri.rstrip("/"), tuple(options))
        return cls(os.path.abspath(uri), tuple(options))

    # -- the file system ---------------------------------------------------------
    @property
    def _parsed(self):
        return urlparse(self.uri) if "://" in self.uri else None

    @property
    def fs(self) -> pafs.FileSystem:
        u = self._parsed
        return _filesystem("" if u is None else u.scheme.lower(), "" if u is None else u.netloc, self.options)

    @property
    def root(self) -> str:
        """The directory's path inside :attr:`fs`."""
        u = self._parsed
        if u is None:
            return self.uri
        scheme = u.scheme.lower()
        if scheme in _S3 + _GCS:
            return f"{u.netloc}{u.path}".rstrip("/")
        if scheme in ("hdfs", "viewfs"):
            return u.path.rstrip("/") or "/"
        return f"{u.netloc}{u.path}".rstrip("/") if u.netloc else u.path.rstrip("/")

    def path(self, rel: str = "") -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def __str__(self) -> str:
        return self.uri

    # -- reading -------------------------------------------------------------------
    def read(self, rel: str) -> bytes | None:
        """The bytes of ``rel``, or None when it does not exist."""
        try:
            with self.fs.open_input_stream(self.path(rel)) as fh:
                return fh.read()
        except OSError as e:
            if _not_found(e):
                return None
            raise

    def read_json(self, rel: str) -> Any:
        data = self.read(rel)
        return None if data is None else json.loads(data)

    def read_table(self, rel: str) -> pa.Table:
        data = self.read(rel)
        if data is None:
            raise StateError(f"state file {self.uri}/{rel} is missing")
        try:
            return pa.ipc.open_stream(data).read_all()
        except pa.ArrowInvalid as e:
            raise StateError(f"state file {self.uri}/{rel} is damaged: {e}") from None

    def missing(self, rels: Iterable[str]) -> list[str]:
        """Those of ``rels`` that do not exist (one call)."""
        rels = list(rels)
        infos = self.fs.get_file_info([self.path(r) for r in rels]) if rels else []
        return [r for r, i in zip(rels, infos) if i.type == pafs.FileType.NotFound]

    def list(self, rel: str = "") -> list[str]:
        """The names directly under ``rel`` (none when it does not exist)."""
        sel = pafs.FileSelector(self.path(rel), allow_not_found=True)
        return sorted(i.base_name for i in self.fs.get_file_info(sel))

    def walk(self, rel: str = "") -> list[pafs.FileInfo]:
        """Every file below ``rel``."""
        sel = pafs.FileSelector(self.path(rel), allow_not_found=True, recursive=True)
        return [i for i in self.fs.get_file_info(sel) if i.type == pafs.FileType.File]

    # -- writing -------------------------------------------------------------------
    def _parent(self, rel: str) -> None:
        if self.fs.type_name in _RENAMES:
            self.fs.create_dir(self.path(rel).rsplit("/", 1)[0], recursive=True)

    def write_unique(self, rel: str, write) -> None:
        """Write a name no other attempt uses: ``write(stream)`` streams it
        out. A crash leaves at most a partial file that nothing names."""
        self._parent(rel)
        with self.fs.open_output_stream(self.path(rel)) as out:
            write(out)

    def write_table(self, rel: str, table: pa.Table) -> None:
        """``table`` as an Arrow IPC stream under a name no other attempt uses."""

        def write(out):
            with pa.ipc.new_stream(out, table.schema) as w:
                w.write_table(table)

        self.write_unique(rel, write)

    def publish(self, rel: str, write) -> None:
        """Write a fixed name whole or not at all: written beside it and
        renamed where a rename of a file is atomic (local, HDFS), else one
        upload (an object store's PUT)."""
        self._parent(rel)
        final = self.path(rel)
        if self.fs.type_name not in _RENAMES:
            with self.fs.open_output_stream(final) as out:
                write(out)
            return
        tmp = f"{final}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            with self.fs.open_output_stream(tmp) as out:
                write(out)
            self.fs.move(tmp, final)
        except BaseException:
            try:
                self.fs.delete_file(tmp)
            except OSError:
                pass
            raise

    def publish_bytes(self, rel: str, data: bytes) -> None:
        self.publish(rel, lambda out: out.write(data))

    def publish_json(self, rel: str, obj: Any) -> None:
        self.publish_bytes(rel, json.dumps(obj, sort_keys=True).encode())

    def publish_parquet(self, rel: str, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        self.publish(rel, lambda out: pq.write_table(table, out))

    def delete(self, rel: str) -> None:
        """Delete the file ``rel``; one that is not there is no error."""
        self._gone(self.fs.delete_file, rel)

    def delete_dir(self, rel: str) -> None:
        """Delete the folder ``rel`` and all below it; one that is not there is no error."""
        self._gone(self.fs.delete_dir, rel)

    def _gone(self, delete, rel: str) -> None:
        try:
            delete(self.path(rel))
        except OSError as e:
            if not _not_found(e):
                raise

    def probe(self, what: str, under: str = "") -> None:
        """Write, read back and delete a small object (in folder ``under``):
        a location that cannot be used (no answer, wrong keys, no bucket,
        read-only) is refused in one line before the first micro-batch."""
        rel = f"{under}/" * bool(under) + f".gpuwm-probe-{uuid.uuid4().hex[:12]}"
        try:
            self.publish_bytes(rel, b"ok")
            if self.read(rel) != b"ok":
                raise OSError("what was written could not be read back")
            self.delete(rel)
        except Exception as e:
            raise ConfigError(f"{what} {self.uri!r} cannot be used: {_first_line(e)}") from None


# -- the checkpoint's layout -----------------------------------------------------
#: the layout's version, in ``gpuwm/FORMAT``; a checkpoint of another is refused
FORMAT = 3
_VERSION_MAGIC = b"GPUWMV3\n"


def attempt_id() -> str:
    """A name part unique to this attempt of a task (Spark's attempt id where there is one)."""
    tag = uuid.uuid4().hex[:10]
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
        if tc is not None:
            return f"a{tc.taskAttemptId()}-{tag}"
    except Exception:
        pass
    return tag


class Checkpoint:
    """``<checkpoint>/gpuwm/``, gpuwm's half of a query's checkpoint, and
    Spark's offset and commit logs beside it::

        gpuwm/FORMAT                       {"format": 3}
        gpuwm/pipeline.json                the pipeline that writes the state
        gpuwm/owner.json                   the running query's lease
        gpuwm/drain.json                   the drain request (gpuwm.spark.driver.drain)
        gpuwm/drains/after-<N>[-end]       a drain asked for after batch N: the drain source's files
        gpuwm/now/<N>                      batch N's processing time
        gpuwm/commits/<N>.json             batch N committed: its state versions, filter state, metrics
        gpuwm/state/<N>/filter-<attempt>.arrow    the watermark filter's state after N
        gpuwm/state/<N>/s<S>-v<V>-<attempt>.gwm   a state version of stage S on vnode V
        gpuwm/exchange/<N>/<tag>/to-<R>-from-<V>-<attempt>.arrow   rows between tasks: segments,
                                           ranges, rows held by alignment, console output
        offsets/<N>, commits/<N>           Spark's
    """

    def __init__(self, loc: Location):
        self.loc = loc

    def __reduce__(self):
        return (Checkpoint, (self.loc,))

    def __str__(self) -> str:
        return self.loc.uri

    def __eq__(self, other) -> bool:
        return isinstance(other, Checkpoint) and other.loc == self.loc

    def __hash__(self) -> int:
        return hash(self.loc)

    # -- names -----------------------------------------------------------------------
    @staticmethod
    def state_dir(batch_id: int) -> str:
        return f"gpuwm/state/{batch_id:010d}"

    @staticmethod
    def commit_name(batch_id: int) -> str:
        return f"gpuwm/commits/{batch_id:010d}.json"

    @classmethod
    def version_name(cls, batch_id: int, stage: int, vnode: int) -> str:
        return f"{cls.state_dir(batch_id)}/s{stage:02d}-v{vnode:05d}-{attempt_id()}.gwm"

    @classmethod
    def filter_name(cls, batch_id: int) -> str:
        return f"{cls.state_dir(batch_id)}/filter-{attempt_id()}.arrow"

    @staticmethod
    def exchange_dir(batch_id: int) -> str:
        return f"gpuwm/exchange/{batch_id:010d}"

    def write_piece(self, batch_id: int, tag: str, dest: int, vnode: int, rows: pa.Table) -> str:
        """``rows`` from ``vnode`` to ``dest`` in batch ``batch_id``'s exchange
        ``tag``: one attempt-unique Arrow IPC piece, deleted once the batch is
        committed. Its name, which the flow row or the task's result carries."""
        name = f"{self.exchange_dir(batch_id)}/{tag}/to-{dest:05d}-from-{vnode:05d}-{attempt_id()}.arrow"
        self.loc.write_table(name, rows)
        return name

    DRAIN = "gpuwm/drain.json"
    PIPELINE = "gpuwm/pipeline.json"
    OWNER = "gpuwm/owner.json"
    FORMAT_FILE = "gpuwm/FORMAT"

    # -- state versions ----------------------------------------------------------------
    def write_version(self, batch_id: int, stage: int, vnode: int, tables: dict[str, pa.Table],
                      parts: dict[str, pa.Table], kept: dict[str, list]) -> tuple[str, dict[str, list]]:
        """One stage's state on one vnode as version ``batch_id``: one object
        holding its small tables and the parts it changed (Arrow IPC streams
        one after another), its footer naming where every part is — here, or
        (``kept``: unchanged parts) in an older version's object as
        ``[object, offset, length]``. Returns the object's name and the
        parts' places."""
        name = self.version_name(batch_id, stage, vnode)
        places: dict[str, dict[str, list]] = {"tables": {}, "parts": dict(kept)}

        def write(out) -> None:
            for kind, items in (("tables", tables), ("parts", parts)):
                for key, t in items.items():
                    at = out.tell()
                    with pa.ipc.new_stream(out, t.schema) as w:
                        w.write_table(t)
                    places[kind][key] = [name, at, out.tell() - at]
            footer = json.dumps(places, sort_keys=True).encode()
            out.write(footer)
            out.write(len(footer).to_bytes(8, "little"))
            out.write(_VERSION_MAGIC)

        self.loc.write_unique(name, write)
        return name, places["parts"]

    def read_version(self, name: str) -> tuple[dict[str, pa.Table], dict[str, pa.Table], dict[str, list]]:
        """A state version's tables and parts (reading each object it names
        once), and the parts' places."""
        own = self._read_object(name)
        if len(own) < 16 or own[-8:] != _VERSION_MAGIC:
            raise StateError(f"state version {self.loc.uri}/{name} is damaged (no footer)")
        n = int.from_bytes(own[-16:-8], "little")
        places = json.loads(own[-16 - n:-16])
        objects = {name: own}
        others = sorted({p[0] for p in places["parts"].values()} - {name})
        if others:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(8, len(others))) as ex:
                objects.update(zip(others, ex.map(self._read_object, others)))

        def table(place: list) -> pa.Table:
            obj, at, length = place
            try:
                return pa.ipc.open_stream(pa.py_buffer(objects[obj])[at:at + length]).read_all()
            except pa.ArrowInvalid as e:
                raise StateError(f"state object {self.loc.uri}/{obj} is damaged: {e}") from None

        tables = {k: table(p) for k, p in places["tables"].items()}
        parts = {k: table(p) for k, p in places["parts"].items()}
        return tables, parts, places["parts"]

    def _read_object(self, name: str) -> bytes:
        data = self.loc.read(name)
        if data is None:
            raise StateError(f"state object {self.loc.uri}/{name} is missing")
        return data

    # -- commits -------------------------------------------------------------------------
    def commit(self, batch_id: int) -> dict | None:
        """Batch ``batch_id``'s commit, or None."""
        return self.loc.read_json(self.commit_name(batch_id))

    def committed_batches(self) -> list[int]:
        return sorted(int(n.removesuffix(".json")) for n in self.loc.list("gpuwm/commits")
                      if n.endswith(".json") and n.removesuffix(".json").isdigit())

    def write_filter(self, batch_id: int, table: pa.Table) -> str:
        """The watermark filter's state after ``batch_id``, written by the
        task that folded it (an attempt-unique name: the commit names the
        winner). Its name."""
        name = self.filter_name(batch_id)
        self.loc.write_table(name, table)
        return name

    def read_filter(self, name: str) -> bytes:
        data = self.loc.read(name)
        if data is None:
            raise StateError(f"the watermark filter's state {self.loc.uri}/{name} is missing")
        return data

    def write_commit(self, batch_id: int, versions: dict[str, str], files: list[str], filter_name: str,
                     metrics: dict, keep: int = 2) -> None:
        """Commit batch ``batch_id`` (the driver, after every task of it
        succeeded): the commit naming the state versions and the filter
        state that won; written once. Then what no version kept still
        names is deleted."""
        self.loc.publish_json(self.commit_name(batch_id), {
            "format": FORMAT, "batch_id": batch_id, "versions": versions, "files": sorted(set(files)),
            "filter": filter_name, "metrics": metrics})
        self._collect(batch_id, keep)

    def filter_state(self, batch_id: int) -> bytes:
        c = self.commit(batch_id)
        if c is None:
            raise StateError(f"batch {batch_id} has no commit under {self.loc.uri}/gpuwm")
        return self.read_filter(c["filter"])

    def _collect(self, batch_id: int, keep: int) -> None:
        """After committing ``batch_id``: versions older than the last
        ``keep`` go. A file of batch R's directory, or one R's commit names,
        is garbage once the oldest kept commit does not name it (a state
        version names files of its own batch or older ones that the version
        before it named too)."""
        loc = self.loc
        committed = self.committed_batches()
        kept = [b for b in committed if b > batch_id - keep]
        live = set()
        if kept:
            live = set((self.commit(kept[0]) or {}).get("files", ()))
        for b in [b for b in committed if b <= batch_id - keep]:
            c = self.commit(b) or {}
            dead = [f for f in c.get("files", ()) if f not in live]
            d = self.state_dir(b)
            dead += [f"{d}/{n}" for n in loc.list(d) if f"{d}/{n}" not in live]
            for f in dead:
                loc.delete(f)
            loc.delete(self.commit_name(b))
        for n in loc.list("gpuwm/exchange"):  # the batch's exchanged pieces: a replay writes them again
            if n.isdigit() and int(n) <= batch_id:
                loc.delete_dir(f"gpuwm/exchange/{n}")
        for n in loc.list("gpuwm/now"):
            if n.isdigit() and int(n) <= batch_id - keep:
                loc.delete(f"gpuwm/now/{n}")

    # -- the driver's small files ----------------------------------------------------------
    def now_for_batch(self, batch_id: int, now: str) -> str:
        """The processing time of a batch, fixed at its first attempt (a
        replay sees the same idleness): the one written, else ``now``."""
        rel = f"gpuwm/now/{batch_id}"
        got = self.loc.read(rel)
        if got is not None:
            return got.decode().strip()
        self.loc.publish_bytes(rel, now.encode())
        return now

    # -- Spark's logs --------------------------------------------------------------------------
    def spark_log_entry(self, log: str, batch_id: int) -> bytes | None:
        """Batch ``batch_id``'s entry in Spark's ``offsets`` or ``commits`` log, or None."""
        return self.loc.read(f"{log}/{batch_id}")

    def spark_batches(self, log: str) -> list[int]:
        """The batch ids in Spark's ``offsets`` or ``commits`` log."""
        return sorted(int(n) for n in self.loc.list(log) if n.isdigit())

    def logged_offsets(self, batch_id: int) -> list[dict | None]:
        """The end offsets of ``batch_id`` in Spark's offset log ("v1", the
        batch's metadata, then one line per source) as JSON objects, None
        where a line is not one. Raises OSError when the entry cannot be read."""
        data = self.spark_log_entry("offsets", batch_id)
        if data is None:
            raise FileNotFoundError(f"{self}/offsets/{batch_id}")
        out: list[dict | None] = []
        for line in data.decode().splitlines()[2:]:
            try:
                v = json.loads(line)
            except ValueError:
                v = None
            out.append(v if isinstance(v, dict) else None)
        return out

    def logged_offset(self, batch_id: int, key: str) -> dict | None:
        """The offset of ``batch_id``'s one source whose offsets have ``key``
        (``offset`` for gpuwm's Nexmark source; ``drain`` for the Python
        drain source of earlier gpuwm versions), or None when the log does not say (no
        entry, no such source, several that differ: the Nexmark inputs of a
        join, one per event kind, share their offsets)."""
        try:
            got = [o for o in self.logged_offsets(batch_id) if o is not None and key in o]
        except OSError:
            return None
        return got[0] if got and all(o == got[0] for o in got) else None

    def last_spark_commit(self) -> int | None:
        """The newest batch id in Spark's commit log (None: none committed)."""
        ids = self.spark_batches("commits")
        return max(ids) if ids else None

    def newest_logged_batch(self) -> int | None:
        """The newest batch id in Spark's offset log (None: no log yet)."""
        ids = self.spark_batches("offsets")
        return max(ids) if ids else None


class Owner:
    """The lease of the query running on a checkpoint (``gpuwm/owner.json``):
    a second query on it is refused before it starts. The running driver
    renews it every :attr:`BEAT` seconds; it is free once released, once
    its driver's process is gone (same host), or once not renewed for
    :attr:`STALE` seconds (another host, or a driver killed). A driver
    that finds it taken by another checks :meth:`check` before each batch
    and commit, and stops."""

    BEAT = 5.0
    STALE = 30.0
    #: the least time :meth:`take` waits between writing the lease and reading it back
    WAIT = 0.05
    #: the queries of this process, by run: a lease of this process is held while its query is active
    _LOCAL: dict[str, Any] = {}

    def __init__(self, ck: Checkpoint, run: str):
        self.ck, self.run = ck, run
        self.lost: dict | None = None
        self._stop = threading.Event()

    @staticmethod
    def _me(run: str) -> dict:
        import socket
        import time

        return {"run": run, "host": socket.gethostname(), "pid": os.getpid(), "heartbeat": time.time()}

    @classmethod
    def _alive(cls, cur: dict) -> bool:
        import socket
        import time

        if cur.get("released"):
            return False
        if time.time() - float(cur.get("heartbeat", 0)) > cls.STALE:
            return False
        if cur.get("host") == socket.gethostname() and cur.get("pid") == os.getpid():
            q = cls._LOCAL.get(cur.get("run"))
            try:
                return q is not None and bool(q.isActive)
            except Exception:
                return False
        if cur.get("host") == socket.gethostname():
            try:
                os.kill(int(cur["pid"]), 0)
            except (ProcessLookupError, ValueError, KeyError):
                return False
            except PermissionError:
                return True
        return True

    @staticmethod
    def _describe(cur: dict) -> str:
        import time

        return (f"query run {cur.get('run')} (host {cur.get('host')}, pid {cur.get('pid')}, "
                f"renewed {time.time() - float(cur.get('heartbeat', 0)):.0f} s ago)")

    @classmethod
    def take(cls, ck: Checkpoint) -> "Owner":
        """The lease, or a ConfigError naming the query that holds it."""
        import time

        t0 = time.perf_counter()
        cur = ck.loc.read_json(Checkpoint.OWNER)
        if cur and cls._alive(cur):
            raise ConfigError(f"checkpoint {ck} is in use by another {cls._describe(cur)}: stop it first, or give "
                              f"this query its own checkpoint location")
        run = uuid.uuid4().hex[:12]
        ck.loc.publish_json(Checkpoint.OWNER, cls._me(run))
        # Two starting at once: the later write wins, and the other sees it if it reads after that write. The
        # other's write follows its own read by about as long as ours took on the same storage (a local disk:
        # ~1 ms; an object store: a GET and a PUT, ~0.1 s): wait several times that, and never less than WAIT.
        time.sleep(max(cls.WAIT, 4 * (time.perf_counter() - t0)))
        got = ck.loc.read_json(Checkpoint.OWNER) or {}
        if got.get("run") != run:
            raise ConfigError(f"checkpoint {ck} was just taken by another {cls._describe(got)}: stop it first, or "
                              f"give this query its own checkpoint location")
        return cls(ck, run)

    def watch(self, query, then: Any = None) -> None:
        """Renew the lease while ``query`` runs; release it when it stops,
        then call ``then`` (a sink's ``close``) if given."""
        self._LOCAL[self.run] = query
        def beat() -> None:
            try:
                while not self._stop.wait(self.BEAT):
                    if not query.isActive:
                        break
                    self.renew()
            except Exception:  # the JVM went away: the process is ending
                return
            self.release()
            if then is not None:
                then()

        threading.Thread(target=beat, name="gpuwm-owner", daemon=True).start()

    def renew(self) -> None:
        got = self.ck.loc.read_json(Checkpoint.OWNER) or {}
        if got.get("run") not in (None, self.run) and self._alive(got):
            self.lost = got
            return
        self.ck.loc.publish_json(Checkpoint.OWNER, self._me(self.run))

    def check(self) -> None:
        if self.lost is not None:
            raise StateError(f"checkpoint {self.ck} was taken over by {self._describe(self.lost)}; "
                             "this query stops without committing")

    def release(self) -> None:
        self._stop.set()
        self._LOCAL.pop(self.run, None)
        try:
            got = self.ck.loc.read_json(Checkpoint.OWNER) or {}
            if got.get("run") == self.run:
                self.ck.loc.publish_json(Checkpoint.OWNER, {**got, "released": True})
        except Exception:
            pass
