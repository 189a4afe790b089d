"""Kafka read directly by gpuwm's tasks: Spark plans, the tasks fetch.

Spark's Kafka source keeps doing what it is there for — subscribing
(``subscribe``/``subscribePattern``/``assign``), choosing each
micro-batch's per-partition offset ranges (``startingOffsets``,
``maxOffsetsPerTrigger``, new partitions from their start, data loss at
planning), logging them in the offset log and replaying them after a crash.
gpuwm takes the ranges of each batch from the batch's own scan (its
``KafkaBatchInputPartition`` objects: topic, partition, from and until
offset, ``failOnDataLoss``, ``includeHeaders``, the executor's consumer
settings) and its tasks fetch them (:func:`gpuwm.spark.io.sources.read_kafka`:
Kafka's Fetch request decoded with NumPy, :mod:`gpuwm.spark.io.kafkawire`,
and ``confluent-kafka`` for what that does not take), one task per Kafka partition
(``partition`` is the natural split), building Spark's Kafka columns in
Arrow and then the query's ``select`` (:mod:`gpuwm.project`).

Used when the pipeline's DataFrame is the Kafka source followed only by
projections the task can evaluate (:func:`gpuwm.spark.catalyst.expressions.project_expr`) and every ``kafka.*``
consumer setting has a librdkafka twin (:data:`_SAME`, :data:`_RENAMED`) or
does not change what is read (:data:`_IGNORED`); otherwise Spark's reader
reads the batches and ``--dry-run`` says why.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ...errors import ConfigError, GpuwmError
from ..catalyst.expressions import Untranslatable, projection_steps
from ..catalyst.plans import peel
from ..catalyst.schema import arrow_schema, columns_apart
from ..jvm.objects import java_map, scala_iter, scan_rdds

# the executor consumer's settings (Java client names) gpuwm's librdkafka consumer takes as they are,
# under another name, or without effect on what a read of fixed offsets returns
_SAME = {"bootstrap.servers", "group.id", "isolation.level", "client.id", "client.rack", "security.protocol",
         "sasl.kerberos.service.name", "sasl.kerberos.principal", "ssl.key.password", "fetch.max.bytes", "fetch.min.bytes", "max.partition.fetch.bytes", "fetch.max.wait.ms", "check.crcs",
         "reconnect.backoff.ms", "reconnect.backoff.max.ms", "retry.backoff.ms", "metadata.max.age.ms",
         "connections.max.idle.ms", "socket.connection.setup.timeout.ms", "session.timeout.ms",
         "heartbeat.interval.ms", "max.poll.interval.ms"}
_RENAMED = {"receive.buffer.bytes": "socket.receive.buffer.bytes", "send.buffer.bytes": "socket.send.buffer.bytes"}
_IGNORED = {"key.deserializer", "value.deserializer", "enable.auto.commit", "auto.offset.reset", "max.poll.records",
            "request.timeout.ms", "default.api.timeout.ms", "auto.commit.interval.ms", "client.dns.lookup",
            "allow.auto.create.topics", "exclude.internal.topics", "interceptor.classes", "metric.reporters",
            "metrics.num.samples", "metrics.sample.window.ms", "metrics.recording.level", "partition.assignment.strategy"}
# how tasks fetch: Kafka's protocol decoded with NumPy (gpuwm.spark.io.kafkawire; what it does not take goes
# to confluent-kafka), or confluent-kafka for every range
FETCH_ENV = "GPUWM_KAFKA_FETCH"
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


# TLS and SASL: the Java client's settings with a librdkafka twin (certificates in PEM; sasl.jaas.config apart)
_SECURITY = {"ssl.truststore.location": "ssl.ca.location", "ssl.truststore.certificates": "ssl.ca.pem",
             "ssl.keystore.key": "ssl.key.pem", "ssl.keystore.certificate.chain": "ssl.certificate.pem"}
_KNOWN_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")


def consumer_conf(params: dict) -> tuple[dict | None, str | None]:
    """librdkafka settings for a Java consumer's ``params`` (Spark's
    executor settings), or (None, why not). TLS settings are taken in PEM
    (``ssl.truststore.type`` / ``ssl.keystore.type`` PEM: files or the
    certificates themselves) — a JKS or PKCS12 trust store as the
    certificates the JDK's ``keytool`` reads from it —, a
    ``sasl.jaas.config`` of PLAIN or SCRAM as
    its user name and password; a mechanism Kafka does not have is a
    :class:`~gpuwm.errors.ConfigError`."""
    conf: dict[str, Any] = {"isolation.level": "read_uncommitted"}  # the Java client's default (librdkafka's differs)
    for k, v in params.items():
        v = str(v)
        if k in _IGNORED or k in ("ssl.truststore.password", "ssl.keystore.password"):
            continue  # (a PEM store has none; a JKS or PKCS12 trust store's is read below)
        if k == "sasl.mechanism":
            if v.upper() not in _KNOWN_MECHANISMS:
                raise ConfigError(f"Kafka setting kafka.sasl.mechanism={v!r} is not a SASL mechanism Kafka has "
                                  f"({', '.join(_KNOWN_MECHANISMS)})")
            conf["sasl.mechanism"] = v.upper()
        elif k == "sasl.jaas.config":
            login, why = _jaas(v)
            if why is not None:
                return None, why
            conf.update(login)
        elif k in ("ssl.truststore.type", "ssl.keystore.type"):
            if v.upper() not in (("PEM", "JKS", "PKCS12") if k == "ssl.truststore.type" else ("PEM",)):
                return None, f"Kafka setting kafka.{k}={v}: gpuwm's consumer takes key stores in PEM"
        elif k == "ssl.keystore.location" and not _pem(params, "keystore"):
            return None, f"Kafka setting kafka.{k} of type JKS (Java's default): gpuwm's consumer takes PEM"
        elif k == "ssl.truststore.location" and not _pem(params, "truststore"):  # JKS or PKCS12: keytool reads it
            from ..jvm.jars import store_certificates

            kind = str(params.get("ssl.truststore.type", "JKS"))
            try:
                conf["ssl.ca.pem"] = store_certificates(v, kind, params.get("ssl.truststore.password"))
            except (OSError, ConfigError) as e:
                return None, f"Kafka setting kafka.ssl.truststore.location ({kind}) could not be read here: {e}"
        elif k == "ssl.keystore.location":  # one PEM file: the private key and the certificate chain
            conf["ssl.certificate.location"] = conf["ssl.key.location"] = v
        elif k == "ssl.endpoint.identification.algorithm":
            conf[k] = v or "none"  # (Java: empty turns the host name check off)
        elif k in _SECURITY:
            conf[_SECURITY[k]] = v
        elif k in _SAME or k in _RENAMED:
            conf[_RENAMED.get(k, k)] = v
        else:
            return None, f"Kafka setting kafka.{k} has no equivalent in gpuwm's librdkafka consumer"
    return conf, None


def _pem(params: dict, store: str | None = None) -> bool:
    """The trust store's (``store``: ``truststore`` or ``keystore``; None: every one given) type is PEM."""
    stores = [store] if store else [s for s in ("truststore", "keystore")
                                    if f"ssl.{s}.location" in params or f"ssl.{s}.type" in params]
    return bool(stores) and all(str(params.get(f"ssl.{s}.type", "JKS")).upper() == "PEM" for s in stores)


def _jaas(text: str) -> tuple[dict, str | None]:
    """A ``sasl.jaas.config`` of PLAIN or SCRAM as librdkafka's
    ``sasl.username`` and ``sasl.password``, or ({}, why not).

    >>> _jaas('org.apache.kafka.common.security.scram.ScramLoginModule required username="al" password="p\\\\"w";')
    ({'sasl.username': 'al', 'sasl.password': 'p"w'}, None)
    """
    import re

    module = text.strip().split(None, 1)[0] if text.strip() else ""
    if module.rsplit(".", 1)[-1] not in ("PlainLoginModule", "ScramLoginModule"):
        return {}, (f"Kafka setting kafka.sasl.jaas.config logs in with {module or 'nothing'}: Spark's reader does "
                    "(gpuwm's consumer takes PLAIN and SCRAM logins)")
    opts = {m.group(1): re.sub(r"\\(.)", r"\1", m.group(2)) if m.group(2) is not None else m.group(3)
            for m in re.finditer(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;]+))', text)}
    if "username" not in opts or "password" not in opts:
        return {}, "Kafka setting kafka.sasl.jaas.config names no username and password"
    return {"sasl.username": opts["username"], "sasl.password": opts["password"]}, None


def source_conf(options: dict[str, str]) -> tuple[dict | None, str | None]:
    """:func:`consumer_conf` of a Kafka source's ``kafka.*`` options."""
    return consumer_conf({k[len("kafka."):]: v for k, v in options.items() if k.lower().startswith("kafka.")})


def kafka_source(df) -> tuple[dict | None, str | None]:
    """The Kafka source under ``df`` (a streaming DataFrame) and the
    projection on it — ``({"steps": ...}, None)`` — or
    ``(None, why gpuwm's tasks cannot read it)``; ``(None, None)``: not a
    Kafka source at all."""
    try:
        node, projects = peel(df._jdf.queryExecution().analyzed())
        name = node.getClass().getSimpleName()
        if name not in ("StreamingRelationV2", "StreamingRelation"):
            return None, None
        fmt = str(node.sourceName() if name == "StreamingRelationV2" else node.dataSource().className()).lower()
        if "kafka" not in fmt:
            return None, None
        if name != "StreamingRelationV2":
            return None, "the Kafka source is not Spark's v2 Kafka source"
        out = list(scala_iter(node.output()))
        steps, why = projection_steps(projects, out)
        if why is not None:
            return None, why
        options = java_map(node.extraOptions())
        conf, why = source_conf(options)
        if why is not None:
            return None, why
        why = _same_schema(steps, any(str(a.name()) == "headers" for a in out), df.schema)
        if why is not None:
            return None, why
        return {"steps": steps, "conf": conf}, None
    except Untranslatable as e:
        return None, f"the task cannot evaluate `{e}` of the select on the Kafka source"
    except Exception as e:  # not classic PySpark, or a plan shape we do not know
        return None, f"the Kafka source's plan cannot be inspected ({type(e).__name__})"


def source_options(df) -> list[dict[str, str]]:
    """The options of every Kafka source under ``df`` (a streaming
    DataFrame: one input, a union, a join), as the user gave them."""
    try:
        stack, found = [df._jdf.queryExecution().analyzed()], []
        while stack:
            node = stack.pop()
            if node.getClass().getSimpleName() == "StreamingRelationV2" and "kafka" in str(node.sourceName()).lower():
                found.append(java_map(node.extraOptions()))
            stack.extend(scala_iter(node.children()))
        return found
    except Exception:  # not classic PySpark: Spark's own checks are all there is
        return []


def replay_failure(e: Exception, ck) -> bool:
    """Whether ``e``, a query's failure, is Spark's Kafka connector
    (4.1.0–4.1.2) throwing from its progress metrics (``Some(null).get.map``) on a
    restarted query's first micro-batch, the replay of the batch in flight
    at a crash, after that batch ran and was committed (SPARK-57438): the
    newest batch of the checkpoint ``ck``'s offset log is committed."""
    msg = str(e)
    if not ("IterableOps.map" in msg and "Option.get()" in msg):
        return False
    last = ck.newest_logged_batch()
    return last is not None and last in ck.spark_batches("commits")


PROBE_S = 15.0  # how long a broker has to answer before the query starts (kafka.default.api.timeout.ms overrides)


def probe(options: dict[str, str]) -> None:
    """Fail in one line before the query starts when a Kafka source's
    brokers do not answer, or a topic it names (``subscribe``, ``assign``)
    does not exist or lacks a partition: Spark's own reader would retry for
    minutes and then fail with a Java trace. ``subscribePattern`` may match
    topics created later, and is not checked."""
    import json

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from ...errors import ConfigError, near_miss

    opts = {k.lower(): v for k, v in options.items()}
    servers = opts.get("kafka.bootstrap.servers")
    if not servers:
        raise ConfigError("Kafka source: option kafka.bootstrap.servers is required (host:port[,host:port...])")
    said = json.dumps(sorted(opts.items()))
    if time.monotonic() - _ANSWERED.get(said, -1e9) < PROBE_AGAIN_S:  # (gpuwm run asked before Spark started)
        return
    conf, why = source_conf(options)
    if why is not None:  # settings only Spark's consumer knows (e.g. a JAAS login): Spark checks for itself
        return
    wait = float(opts.get("kafka.default.api.timeout.ms", PROBE_S * 1000)) / 1000
    admin = {k: v for k, v in conf.items() if k not in ("isolation.level", "group.id")}
    errors: list = []  # what librdkafka reports on the way (a refused login, an untrusted certificate)
    try:
        client = AdminClient({**admin, "logger": _quiet(), "error_cb": errors.append})
    except KafkaException as e:  # a setting librdkafka cannot use (a certificate file not there, ...)
        raise ConfigError(f"Kafka source: {_java_names(str(e.args[0].str() if e.args else e))}") from None
    deadline = time.monotonic() + wait
    while True:
        try:
            meta = client.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            break
        except KafkaException as e:
            client.poll(0)  # (librdkafka's errors reach error_cb here)
            why = _security_error(errors, conf, servers)
            if why is not None:
                raise KafkaProbeError(why) from None
            if time.monotonic() >= deadline:
                raise KafkaProbeError(f"Kafka brokers {servers} (kafka.bootstrap.servers) did not answer within "
                                      f"{wait:g} s ({e.args[0].str() if e.args else e}): is Kafka running and "
                                      "reachable from here? Nothing was read or committed") from None
    topics = {t: len(m.partitions) for t, m in meta.topics.items() if m.error is None}
    wanted: dict[str, list[int]] = {}
    if "subscribe" in opts:
        wanted = {t.strip(): [] for t in opts["subscribe"].split(",") if t.strip()}
    elif "assign" in opts:
        try:
            wanted = {str(t): [int(p) for p in ps] for t, ps in json.loads(opts["assign"]).items()}
        except (ValueError, TypeError, AttributeError):
            raise ConfigError(f"Kafka source: assign must be JSON like {{\"topic\": [0, 1]}}, got {opts['assign']!r}") \
                from None
    for t, ps in wanted.items():
        if t not in topics:
            raise KafkaProbeError(f"Kafka topic {t!r} does not exist on {servers}{near_miss(t, topics)} "
                                  f"(topics there: {sorted(topics)[:20]}); create it or fix the source's "
                                  f"{'subscribe' if 'subscribe' in opts else 'assign'} option")
        missing = sorted(p for p in ps if not 0 <= p < topics[t])
        if missing:
            raise KafkaProbeError(f"Kafka topic {t!r} has partitions 0..{topics[t] - 1}, not {missing} (assign)")
    _ANSWERED[said] = time.monotonic()


#: when each source's options were last probed and answered (this process)
_ANSWERED: dict[str, float] = {}
PROBE_AGAIN_S = 60.0  # a probe answered this recently is not asked again


def _security_error(errors: list, conf: dict, servers: str) -> str | None:
    """A refused login or a failed TLS handshake among librdkafka's errors,
    as one line naming the setting to fix; None if neither."""
    import re

    from confluent_kafka import KafkaError

    for e in errors:
        text = re.sub(r" \(after \d+ms in state \w+\)$", "", e.str().split("/bootstrap: ", 1)[-1])
        text = text.split(": broker certificate could not be verified")[0]  # (then librdkafka's own setting names)
        if e.code() == KafkaError._AUTHENTICATION and "SASL" in text:
            return (f"Kafka brokers {servers} refused the SASL {conf.get('sasl.mechanism', 'GSSAPI')} login of user "
                    f"{conf.get('sasl.username')!r} (kafka.sasl.jaas.config, kafka.sasl.mechanism): {text}. "
                    "Nothing was read or committed")
        if "certificate verify failed" in text or "SSL handshake failed" in text or e.code() == KafkaError._SSL:
            where = ("kafka.ssl.truststore.location" if "ssl.ca.location" in conf else "kafka.ssl.truststore.certificates"
                     if "ssl.ca.pem" in conf else "the system's CA certificates (no kafka.ssl.truststore.location)")
            return (f"Kafka brokers {servers}: TLS failed ({text}): is the broker's certificate signed by a CA in "
                    f"{where}, and its name the host's (kafka.ssl.endpoint.identification.algorithm)? "
                    "Nothing was read or committed")
    return None


def _java_names(text: str) -> str:
    """librdkafka's words for a setting in the Java client's, as the source's options name them."""
    for java, ours in {**_SECURITY, "ssl.keystore.location": "ssl.key.location"}.items():
        text = text.replace(ours, f"kafka.{java}")
    return text.replace("ssl.certificate.location", "kafka.ssl.keystore.location")


def _quiet():
    """A logger for librdkafka's lines (connection refused, each retry): the one error line says it all."""
    import logging

    log = logging.getLogger("gpuwm.kafka.probe")
    log.propagate = False
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    return log


class KafkaProbeError(GpuwmError):
    """A Kafka source's brokers or topics are not there."""


def _same_schema(steps: list, headers: bool, spark_schema) -> str | None:
    """Why the projection's columns would differ from the DataFrame's, or None."""
    from ...project import evaluate
    from ..io.sources import kafka_schema

    return columns_apart(evaluate(steps, kafka_schema(headers).empty_table()).schema, arrow_schema(spark_schema))


def read_path(source: dict) -> str:
    """How a Kafka source's tasks read (for ``explain`` and ``--dry-run``):
    gpuwm's own fetch, or confluent-kafka and why (the settings of the
    source's ``kafka.*`` options; each batch's ranges are checked again
    against the executor's)."""
    from ..io.kafkawire import wire_ok

    fetch = os.environ.get(FETCH_ENV, "wire")
    why = f"{FETCH_ENV}={fetch}" if fetch != "wire" else wire_ok(source.get("conf", {}))
    return "its Kafka offset ranges fetched by gpuwm's tasks" + (
        "" if why is None else f" through confluent-kafka ({why}), not gpuwm's own fetch")


def batch_source(source: dict, batch_df) -> tuple[dict | None, str | None]:
    """What a micro-batch's tasks read: ``source`` (:func:`kafka_source`)
    with the batch's ranges (:func:`batch_ranges`) and the librdkafka
    settings of Spark's executor consumer — its ``parts`` empty for a batch
    without Kafka rows —, or (None, why the tasks cannot read it)."""
    got = batch_ranges(batch_df)
    if got is None:
        return None, "its Kafka offset ranges could not be found in the batch's scan"
    if not got["parts"]:
        return got, None
    conf, why = consumer_conf(got["params"])
    fetch = os.environ.get(FETCH_ENV, "wire")
    if fetch not in ("wire", "client"):
        raise ConfigError(f"{FETCH_ENV}={fetch!r}: 'wire' (the default) or 'client'")
    return (None, why) if why is not None else ({**source, **got, "conf": conf, "fetch": fetch}, None)


def batch_ranges(batch_df) -> dict | None:
    """A micro-batch's Kafka ranges, as Spark planned them, from its scan:
    ``{"parts": [{"topic", "partition", "ranges": [[from, until], ...]}],
    "params", "fail_on_data_loss", "headers", "poll_ms"}`` (a partition's
    ranges joined when ``minPartitions`` split them), ``{"parts": []}`` for a
    batch without Kafka rows, or None when the scan cannot be found."""
    try:
        found = [p for r in scan_rdds(batch_df, "DataSourceRDD") for g in scala_iter(r.inputPartitions())
                 for p in scala_iter(g)]
        if not found:
            return {"parts": []}
        if any(p.getClass().getSimpleName() != "KafkaBatchInputPartition" for p in found):
            return None
        parts: dict[tuple, list] = {}
        for p in found:
            o = p.offsetRange()
            tp = (str(o.topicPartition().topic()), int(o.topicPartition().partition()))
            parts.setdefault(tp, []).append([int(o.fromOffset()), int(o.untilOffset())])
        first = found[0]
        return {"parts": [{"topic": t, "partition": n, "ranges": _joined(rs)} for (t, n), rs in parts.items()],
                "params": java_map(first.executorKafkaParams()),
                "fail_on_data_loss": bool(first.failOnDataLoss()), "headers": bool(first.includeHeaders()),
                "poll_ms": int(first.pollTimeoutMs())}
    except Exception:
        return None


def _joined(ranges: list) -> list:
    out: list[list[int]] = []
    for a, z in sorted(ranges):
        if out and out[-1][1] == a:
            out[-1][1] = z
        else:
            out.append([a, z])
    return out
