"""Kafka record batches decoded with NumPy (:mod:`gpuwm.spark.io.kafkawire`)
against batches written here byte by byte from Kafka's message format v2
(KIP-98: a 61-byte batch header, then per record its length, attributes,
timestamp and offset deltas, key, value and headers, each length a zigzag
varint): random records — every varint width, 0x00 and 0x80 bytes in keys
and values, nulls, headers — in batches of up to a few thousand records,
under each of Kafka's codecs (compressed here by other libraries than the
decoder's). The broker tests (``test_kafka.py``) compare the same
decoder with confluent-kafka and Spark's reader on a real topic."""

from __future__ import annotations

import gzip
import struct

import lz4.frame
import numpy as np
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from gpuwm.spark.io.kafkawire import CODECS, Unsupported, batches, records


def _varint(n: int) -> bytes:
    u = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while True:
        b, u = u & 0x7F, u >> 7
        out.append(b | (0x80 if u else 0))
        if not u:
            return bytes(out)


def _bytes(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def _record(i: int, ts_delta: int, key, value, headers) -> bytes:
    body = (b"\x00" + _varint(ts_delta) + _varint(i) + _bytes(key) + _bytes(value) + _varint(len(headers))
            + b"".join(_bytes(k.encode()) + _bytes(v) for k, v in headers))
    return _varint(len(body)) + body


def _snappy_literals(data: bytes) -> bytes:
    """Raw snappy (its format description) written as literals only: the
    length as a varint, then literal elements of up to 2^16 bytes (tag
    ``61 << 2``: a 2-byte little-endian length - 1 follows)."""
    out, n = bytearray(), len(data)
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    for i in range(0, len(data), 1 << 16):
        part = data[i: i + (1 << 16)]
        out += bytes([61 << 2]) + (len(part) - 1).to_bytes(2, "little") + part
    return bytes(out)


def _xerial(data: bytes) -> bytes:
    """snappy-java's framing, as Kafka's Java producer writes snappy: magic,
    version 1, compatible version 1, then (int32 length, raw snappy) blocks
    (here up to eight of them, at least 100 bytes each)."""
    block = max(100, -(-len(data) // 8))
    out = [b"\x82SNAPPY\x00", struct.pack(">ii", 1, 1)]
    for i in range(0, len(data), block):
        raw = _snappy_literals(data[i: i + block])
        out += [struct.pack(">i", len(raw)), raw]
    return b"".join(out)


#: a batch's records compressed by codec id, with libraries other than the decoder's (cramjam)
COMPRESS = {1: gzip.compress, 2: _snappy_literals, 3: lz4.frame.compress, 4: zstandard.compress, 5: _xerial}


def _batch(base: int, base_ts: int, recs: list, attrs: int = 0, pid: int = -1, codec: int = 0,
           deltas: list | None = None) -> bytes:
    """A v2 batch of ``recs``; ``deltas``: their offset deltas (compaction
    leaves gaps), else 0, 1, ...; ``codec``: Kafka's (1 gzip, 2 snappy, 3
    lz4, 4 zstd), 5 for snappy in xerial blocks (Java's producer)."""
    deltas = list(range(len(recs))) if deltas is None else deltas
    body = b"".join(_record(d, *r) for d, r in zip(deltas, recs))
    if codec:
        body = COMPRESS[codec](body)
        codec = 2 if codec == 5 else codec
    max_ts = base_ts + max((r[0] for r in recs), default=0)
    head = struct.pack(">ibIhiqqqhii", 0, 2, 0, attrs | codec, deltas[-1], base_ts, max_ts, pid, 0, 0, len(recs))
    return struct.pack(">qi", base, len(head) + len(body)) + head + body


_BYTES = st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([b"\x00" * 200, b"\x80\x00" * 8200]))
_RECORD = st.tuples(st.integers(-(1 << 40), 1 << 40), _BYTES, _BYTES,
                    st.lists(st.tuples(st.text(max_size=5), _BYTES), max_size=3))


@given(st.lists(st.tuples(st.lists(_RECORD, min_size=1, max_size=12), st.integers(0, 5),
                          st.booleans(), st.integers(0, 3)), min_size=1, max_size=5),
       st.sampled_from([0, 1, 2500]))
def test_records_decode_as_written(spec, many):
    """Every field of every record, batch after batch, as written,
    uncompressed and under each of Kafka's codecs; a
    batch of thousands of records (many doubling steps) among them;
    compacted batches (offset deltas with gaps); the offset after the last
    batch; a cut last batch left for the next fetch."""
    data, want, base = b"", [], 100
    for recs, codec, log_append, gap in spec:
        if many:  # many records, small ones (the doubling's depth, not megabytes, is what is tested)
            small = [(ts, k, v, h) for ts, k, v, h in recs
                     if all(len(b or b"") < 50 for b in (k, v, *dict(h).values()))]
            recs = (small * many)[:many] or recs
        deltas = [gap + i * (1 + gap) for i in range(len(recs))]  # gap 0: every offset there
        data += _batch(base, 1_700_000_000_000, recs, attrs=0x8 if log_append else 0, codec=codec, deltas=deltas)
        max_ts = 1_700_000_000_000 + max(r[0] for r in recs)
        want += [(base + d, max_ts if log_append else 1_700_000_000_000 + r[0], int(log_append), r[1], r[2],
                  [(k, v) for k, v in r[3]] or None) for d, r in zip(deltas, recs)]
        base += deltas[-1] + 1 + 3  # a gap between batches, as markers or compaction leave
    cut = data + _batch(base, 0, [(0, b"k", b"v", [])])[:-3]
    got_batches, nxt = batches(np.frombuffer(cut, np.uint8), False, [])
    assert nxt == base - 3 and len(got_batches) == len(spec)
    got = records(got_batches, {"key", "value", "headers"})
    headers = [None if h is None else [(x["key"], x["value"]) for x in h] for h in got["headers"].to_pylist()]
    assert list(zip(got["offset"].tolist(), got["timestamp"].tolist(), got["timestampType"].tolist(),
                    got["key"].to_pylist(), got["value"].to_pylist(), headers)) == want


def test_aborted_transactions_and_markers_are_skipped_as_the_java_consumer_does():
    """``read_committed``: a transactional batch of a producer the fetch
    lists as aborted is skipped up to that producer's abort marker, another
    producer's batch and the same producer's later batch are kept; control
    batches never come out; ``read_uncommitted`` keeps every data batch."""
    tx, ctl = 0x10, 0x30

    def marker(kind: int) -> tuple:  # a control record: key (version 0, type), value (version, epoch)
        return (0, struct.pack(">hh", 0, kind), b"\x00\x00\x00\x00\x00\x00", [])

    later = (_batch(4, 0, [(0, None, b"a4", [])], attrs=tx, pid=7)     # 7's next transaction
             + _batch(5, 0, [(0, None, b"plain", [])]))
    data = (_batch(0, 0, [(0, None, b"a0", [])], attrs=tx, pid=7)       # aborted below
            + _batch(1, 0, [(0, None, b"b1", [])], attrs=tx, pid=8)     # committed
            + _batch(2, 0, [marker(0)], attrs=ctl, pid=7)               # abort of 7
            + _batch(3, 0, [marker(1)], attrs=ctl, pid=8)               # commit of 8
            + later)
    buf = np.frombuffer(data, np.uint8)

    def values(committed: bool) -> list:
        kept, nxt = batches(buf, committed, [(7, 0)])
        assert nxt == 6
        return records(kept, {"value"})["value"].to_pylist()

    assert values(True) == [b"b1", b"a4", b"plain"]
    assert values(False) == [b"a0", b"b1", b"a4", b"plain"]
    assert batches(buf, True, [(7, 0)], until=4)[1] == 4  # the range read: no batch from `until` on
    # offsets 1 to 3 gone (compaction): a range [1, 3) is read once the fetch from 1 begins at 4
    assert batches(np.frombuffer(later, np.uint8), True, [], until=3) == ([], 3)


def test_what_it_does_not_decode_is_refused_not_misread():
    """A codec Kafka does not have, a compressed batch that does not
    inflate, an older message format, a record whose fields do not add up
    to its length, offset deltas that do not rise: :class:`Unsupported`
    (the range goes to confluent-kafka), never rows."""
    ok = _batch(0, 0, [(0, b"k", b"v", [])])
    other = bytearray(ok)
    other[22] |= 5  # attributes (low byte): codec 5
    with pytest.raises(Unsupported, match="codec 5"):
        batches(np.frombuffer(bytes(other), np.uint8), False, [])
    for codec in (1, 2, 3, 4):  # its records, uncompressed, marked as compressed
        marked = bytearray(ok)
        marked[22] |= codec
        with pytest.raises(Unsupported, match="does not inflate") as e:
            batches(np.frombuffer(bytes(marked), np.uint8), False, [])
        assert e.value.kind == f"a {CODECS[codec]} batch that does not inflate"
    old = bytearray(ok)
    old[16] = 1  # magic 1
    with pytest.raises(Unsupported, match="message format 1"):
        batches(np.frombuffer(bytes(old), np.uint8), False, [])
    bad = bytearray(ok)
    bad[61] += 2  # the record's length claims two bytes more than it has
    kept, _ = batches(np.frombuffer(bytes(bad) + b"\x00\x00", np.uint8), False, [])
    with pytest.raises(Unsupported):
        records(kept, {"value"})
    twice = _batch(0, 0, [(0, None, b"a", []), (0, None, b"b", [])], deltas=[1, 1])  # two records, one offset
    with pytest.raises(Unsupported, match="do not rise"):
        records(batches(np.frombuffer(twice, np.uint8), False, [])[0], {"value"})


def test_spark_s_security_options_become_the_fetch_s_settings_or_a_reason():
    """Spark's ``kafka.*`` TLS and SASL options as the consumer settings
    both fetches take (PEM stores, a PLAIN or SCRAM login from
    ``sasl.jaas.config``), or — where only Spark's Java client can (a key
    store not in PEM, a trust store not there to read, OAuth) — the
    reason the source stays Spark's; a mechanism Kafka does not have is an
    error naming the setting."""
    from gpuwm.errors import ConfigError
    from gpuwm.spark.driver.kafka import source_conf
    from gpuwm.spark.io.kafkawire import wire_ok

    scram = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p w";'
    conf, why = source_conf({"kafka.bootstrap.servers": "b:9093", "kafka.security.protocol": "SASL_SSL",
                             "kafka.sasl.mechanism": "scram-sha-512", "kafka.sasl.jaas.config": scram,
                             "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/ca.pem",
                             "kafka.ssl.truststore.password": "ignored for PEM",
                             "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": "/me.pem",
                             "kafka.ssl.endpoint.identification.algorithm": ""})
    assert why is None and conf == {
        "isolation.level": "read_uncommitted", "bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p w",
        "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/me.pem", "ssl.key.location": "/me.pem",
        "ssl.endpoint.identification.algorithm": "none"}
    assert wire_ok(conf) is None  # gpuwm's own fetch takes all of it
    oauth = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    for opts, reason in (({"kafka.ssl.truststore.location": "/not/here.jks"}, "(JKS) could not be read here"),
                         ({"kafka.ssl.keystore.location": "/me.jks"}, "of type JKS"),
                         ({"kafka.ssl.keystore.type": "PKCS12"}, "takes key stores in PEM"),
                         ({"kafka.sasl.mechanism": "OAUTHBEARER", "kafka.sasl.jaas.config": oauth},
                          "logs in with org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule")):
        conf, why = source_conf({"kafka.bootstrap.servers": "b:9093", **opts})
        assert conf is None and reason in why, why
    gssapi, _ = source_conf({"kafka.bootstrap.servers": "b:1", "kafka.security.protocol": "SASL_PLAINTEXT",
                             "kafka.sasl.mechanism": "GSSAPI"})
    assert wire_ok(gssapi) == "sasl.mechanism=GSSAPI"  # confluent-kafka's, then
    with pytest.raises(ConfigError, match="kafka.sasl.mechanism='SCRAM-SHA-1' is not a SASL mechanism"):
        source_conf({"kafka.bootstrap.servers": "b:1", "kafka.sasl.mechanism": "SCRAM-SHA-1"})
