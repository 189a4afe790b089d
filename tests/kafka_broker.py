"""A real Apache Kafka broker (KRaft: broker and controller in one JVM) on
loopback, from Maven Central jars (:data:`gpuwm.spark.jvm.jars.BROKER`, fetched by
``gpuwm jars`` or on first use), for the Kafka tests and
``benchmarks/bench_kafka.py``; events go in through ``confluent-kafka``."""

from __future__ import annotations

import base64
import os
import subprocess
import uuid

import pyarrow as pa

from gpuwm.spark.jvm.jars import BROKER, _java, resolve

from .jvm import FLAGS
from .loopback import LoopbackServer, free_ports

#: the user the broker's SASL listeners know, for PLAIN and both SCRAMs
USER, PASSWORD = "alice", "alice-secret"
#: the secure listeners, by name, with their protocol (MTLS: TLS that asks for the client's certificate)
SECURE = {"SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL", "MTLS": "SSL"}


class Broker(LoopbackServer):
    """``with Broker(dir) as b:`` — a one-node cluster at ``b.bootstrap``,
    its data and log under ``dir``; stopped (and its JVM killed if need be)
    on exit. Besides the plain listener: TLS (``SSL``), SASL and SASL over
    TLS (PLAIN, SCRAM-SHA-256 and -512 for :data:`USER`), and TLS with a
    client certificate (``MTLS``) on their own ports (:meth:`options`), with
    certificates for 127.0.0.1 and for the client signed by a CA made at
    start (``b.ca``: its PEM file; ``b.client``: the client's key and
    certificate)."""

    what = "the Kafka broker"

    def __init__(self, workdir: str, heap: str = "512m"):
        self.dir, self.heap = str(workdir), heap
        self.port, self.controller, *rest = free_ports(2 + len(SECURE))  # (all distinct)
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.ports = dict(zip(SECURE, rest))
        self.ca, self.client = os.path.join(self.dir, "ca.pem"), os.path.join(self.dir, "client.pem")

    def options(self, protocol: str, mechanism: str = "SCRAM-SHA-256", password: str = PASSWORD,
                ca: str | None = None) -> dict:
        """Spark's ``kafka.*`` options for the listener of ``protocol``:
        its bootstrap server, the CA (PEM) for TLS, the SASL login, the
        client's certificate (a PEM key store) for ``MTLS``."""
        opts = {"kafka.bootstrap.servers": f"127.0.0.1:{self.ports[protocol]}",
                "kafka.security.protocol": SECURE[protocol]}
        if SECURE[protocol].endswith("SSL"):
            opts.update({"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": ca or self.ca})
        if protocol == "MTLS":
            opts.update({"kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": self.client})
        if protocol.startswith("SASL"):
            module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
            opts.update({"kafka.sasl.mechanism": mechanism, "kafka.sasl.jaas.config":
                         f'org.apache.kafka.common.security.{module} required username="{USER}" '
                         f'password="{password}";'})
        return opts

    def start(self, timeout: float = 60) -> Broker:
        os.makedirs(self.dir, exist_ok=True)
        cp = os.pathsep.join(resolve(BROKER))
        props = os.path.join(self.dir, "server.properties")
        server_pem = os.path.join(self.dir, "server.pem")
        make_certificates(self.ca, server_pem, client_pem=self.client)
        secure = ",".join(f"{n}://127.0.0.1:{p}" for n, p in self.ports.items())
        with open(props, "w") as fh:
            fh.write("\n".join([
                "process.roles=broker,controller", "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{self.controller}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller},{secure}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port},{secure}",
                "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                + ",".join(f"{n}:{p}" for n, p in SECURE.items()),
                "listener.name.mtls.ssl.client.auth=required", "listener.name.mtls.ssl.truststore.type=PEM",
                f"listener.name.mtls.ssl.truststore.location={self.ca}",
                "ssl.keystore.type=PEM", f"ssl.keystore.location={server_pem}",
                "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                *[f"listener.name.{n.lower()}.{m.lower()}.sasl.jaas.config=org.apache.kafka.common.security.{module}"
                  f" required{users};" for n in SECURE if n.startswith("SASL")
                  for m, module, users in (("PLAIN", "plain.PlainLoginModule", f' user_{USER}="{PASSWORD}"'),
                                           ("SCRAM-SHA-256", "scram.ScramLoginModule", ""),
                                           ("SCRAM-SHA-512", "scram.ScramLoginModule", ""))],
                f"log.dirs={os.path.join(self.dir, 'data')}",
                "offsets.topic.replication.factor=1", "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1", "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=false", ""]))
        java = [_java(), f"-Xmx{self.heap}", *FLAGS.split(), "-cp", cp]
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        # (--cluster-id=: an id starting with "-", 1 in 64 of them, would read as an option)
        scram = [a for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
                 for a in ("--add-scram", f"{m}=[name={USER},password={PASSWORD}]")]
        subprocess.run([*java, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster}", "-c", props, *scram],
                       check=True, capture_output=True, timeout=120)
        self._log = open(os.path.join(self.dir, "broker.log"), "w")
        self.proc = subprocess.Popen([*java, "kafka.Kafka", props], stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready(lambda: _admin(self.bootstrap).list_topics(timeout=5), timeout, 0.5)
        return self



def make_certificates(ca_pem: str, server_pem: str, name: str = "gpuwm test CA", client_pem: str | None = None) -> None:
    """A CA (its certificate to ``ca_pem``) and a certificate for 127.0.0.1
    (and localhost) it signed, with its unencrypted PKCS#8 key before it in
    ``server_pem`` (Kafka's PEM key store); ``client_pem``: the same for a
    client (:data:`USER`)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, issuer, key, signer, ca: bool):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=30))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            import ipaddress

            b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                             x509.DNSName("localhost")]), critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    ca = cert(ca_name, ca_name, ca_key, ca_key, True)
    server = cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), ca_name, key, ca_key, False)
    pem = serialization.Encoding.PEM
    with open(ca_pem, "wb") as fh:
        fh.write(ca.public_bytes(pem))
    for path, k, c in [(server_pem, key, server)] + ([(client_pem, *_client(cert, ca_name, ca_key))]
                                                     if client_pem else []):
        with open(path, "wb") as fh:
            fh.write(k.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
                     + c.public_bytes(pem) + ca.public_bytes(pem))


def _client(cert, ca_name, ca_key) -> tuple:
    """A client's key and its certificate (CN :data:`USER`), signed by the CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    return key, cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, USER)]), ca_name, key, ca_key, False)


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int, config: dict | None = None) -> None:
    """Topic ``name`` with ``partitions`` partitions and the topic ``config`` given."""
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)  # kept until the futures are done: a freed client cancels them
    for f in admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                           config=config or {})]).values():
        f.result()


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    """Grow topic ``name`` to ``total`` partitions."""
    from confluent_kafka.admin import NewPartitions

    admin = _admin(bootstrap)
    for f in admin.create_partitions([NewPartitions(name, total)]).values():
        f.result()


def produce(bootstrap: str, topic: str, table: pa.Table, partition: str = "partition",
            transaction: str | None = None, **settings) -> None:
    """Every row of ``table`` as one JSON message (its columns but
    ``partition``; timestamps as epoch milliseconds) to the partition its
    ``partition`` column names; returns once the broker acknowledged all.
    ``transaction`` (a transactional id): all in one transaction, so that a
    ``read_committed`` consumer sees all of them at once or none.
    ``settings``: librdkafka's producer settings (``compression.type``)."""
    from confluent_kafka import Producer

    cols = [c for c in table.column_names if c != partition]
    values = []
    for c in cols:
        a = table.column(c)
        if pa.types.is_timestamp(a.type):  # epoch ms, sub-ms digits cut
            a = a.cast(pa.timestamp("ms", tz="UTC"), safe=False).cast(pa.int64())
        values.append(a.to_pylist())
    parts = table.column(partition).to_pylist()
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 2_000_000,
            "acks": "all", **settings}
    p = Producer({**conf, "transactional.id": transaction} if transaction else conf)
    if transaction:
        p.init_transactions(60)
        p.begin_transaction()
    for i, part in enumerate(parts):
        msg = "{" + ",".join(f'"{c}":{"null" if v[i] is None else v[i]}' for c, v in zip(cols, values)) + "}"
        p.produce(topic, value=msg.encode(), partition=part)
        if i % 100_000 == 99_999:
            p.poll(0)
    if transaction:
        p.commit_transaction(120)
    left = p.flush(120)
    if left:
        raise RuntimeError(f"{left} message(s) to {topic} not acknowledged")


def produce_raw(bootstrap: str, topic: str, messages: list[dict], transaction: str | None = None,
                abort: bool = False, **settings) -> None:
    """Messages as given (``partition``, ``value`` bytes or None, optional
    ``key`` and ``headers`` ``[(str, bytes)]``), in one transaction when
    ``transaction`` is a transactional id — aborted with ``abort``;
    ``settings``: librdkafka's producer settings (``compression.type``)."""
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **settings}
    p = Producer({**conf, "transactional.id": transaction} if transaction else conf)
    if transaction:
        p.init_transactions(60)
        p.begin_transaction()
    for m in messages:
        p.produce(topic, value=m.get("value"), key=m.get("key"), headers=m.get("headers"), partition=m["partition"])
    if transaction:
        p.flush(60)
        (p.abort_transaction if abort else p.commit_transaction)(60)
    left = p.flush(60)
    if left:
        raise RuntimeError(f"{left} message(s) to {topic} not acknowledged")
