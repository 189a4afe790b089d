"""A partition's offset range fetched and decoded without a Python object
per message: Kafka's Fetch request (v4) on a socket to the partition's
leader, and its record batches (magic 2) decoded to Arrow columns with
NumPy. The task side of :func:`gpuwm.spark.io.sources.read_kafka`, which keeps
``confluent-kafka`` for the partition's leader and watermarks and for what
this path does not take (:class:`Unsupported`: an OAUTHBEARER or GSSAPI
login, TLS settings not in PEM, an old message format, any broker error
but a deleted offset), so a range reads the same either way. TLS is
Python's ``ssl``; SASL PLAIN and SCRAM logins are made here (SCRAM's
messages by ``scramp``). Compressed batches — gzip, snappy (raw, as
librdkafka writes it, or in the xerial blocks of Kafka's Java producer),
lz4 (frames) and zstd — are inflated by ``cramjam``, which lets go of the
GIL while it works.

Records are varint-framed one after the other, so where record *i* starts
depends on every record before it. Instead of walking them, every byte
position that could start a record (a varint followed by the attributes
byte, which is 0) gets the position its length points to; jumping those
links by doubling reaches the *i*-th record of every batch at once, in
log2(records a batch) gathers. Each record is then checked whole (its
fields end where its length says, offset deltas rise within the batch up
to its last), so a false start is never taken for a record.

Like Kafka's Java consumer (Spark's reader): control batches are skipped;
under ``read_committed`` a transactional batch of a producer whose
transaction the fetch lists as aborted is skipped up to that producer's
abort marker; a LogAppendTime batch's records carry its max timestamp.
"""

from __future__ import annotations

import socket
import struct
import time

import numpy as np
import pyarrow as pa


class Unsupported(Exception):
    """This range is for ``confluent-kafka``'s reader (the reason in the
    message; ``kind``: the reason without its particulars, which the
    batch's metrics count ranges by)."""

    def __init__(self, why: str, kind: str | None = None):
        super().__init__(why)
        self.kind = kind or why


_BATCH = struct.Struct(">qiibIhiqqqhii")  # baseOffset .. recordCount: the 61-byte v2 batch header
OFFSET_OUT_OF_RANGE = 1


#: the SASL mechanisms this path logs in with (SCRAM through ``scramp``); OAUTHBEARER and GSSAPI are confluent-kafka's
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# the librdkafka TLS and SASL settings this path takes (gpuwm.spark.driver.kafka.consumer_conf makes them)
_SECURITY = {"ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.key.location", "ssl.certificate.pem",
             "ssl.key.pem", "ssl.key.password", "ssl.endpoint.identification.algorithm", "sasl.mechanism",
             "sasl.mechanisms", "sasl.username", "sasl.password"}
SASL_AUTHENTICATION_FAILED = 58


def wire_ok(conf: dict) -> str | None:
    """None where the consumer settings (librdkafka's) are this path's — a
    plain or TLS connection, a PLAIN or SCRAM login or none, TLS settings
    in PEM, no CRC check asked for —, else why not."""
    proto = str(conf.get("security.protocol", "plaintext")).lower()
    if proto not in ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"):
        return f"security.protocol={proto.upper()}"
    if proto.startswith("sasl_"):
        mech = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI"))).upper()
        if mech not in MECHANISMS:
            return f"sasl.mechanism={mech}"
    other = sorted(k for k in conf if k.startswith(("ssl.", "sasl.")) and k not in _SECURITY)
    if other:
        return f"{other[0]} (a setting gpuwm's fetch does not take)"
    if str(conf.get("check.crcs", "false")).lower() == "true":
        return "check.crcs=true"
    return None


def _tls(conf: dict):
    """The TLS context of ``conf``'s settings (librdkafka's): the CA
    (``ssl.ca.location`` / ``ssl.ca.pem``, else the system's), a client
    certificate and key where given (mutual TLS), the host name checked
    unless ``ssl.endpoint.identification.algorithm`` is ``none`` (or empty)."""
    import os
    import ssl
    import tempfile

    key = tuple(sorted((k, str(v)) for k, v in conf.items() if k.startswith("ssl.")))
    got = _TLS.get(key)
    if got is not None:
        return got
    ctx = ssl.create_default_context(cafile=conf.get("ssl.ca.location"), cadata=conf.get("ssl.ca.pem"))
    ctx.check_hostname = str(conf.get("ssl.endpoint.identification.algorithm", "https")).lower() not in ("none", "")
    password = conf.get("ssl.key.password")
    if conf.get("ssl.certificate.location"):
        ctx.load_cert_chain(conf["ssl.certificate.location"], conf.get("ssl.key.location"), password)
    elif conf.get("ssl.certificate.pem"):  # in memory: the ssl module loads a chain from files only
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "client.pem")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as fh:
                fh.write(conf.get("ssl.key.pem", "") + "\n" + conf["ssl.certificate.pem"])
            ctx.load_cert_chain(path, None, password)
    _TLS[key] = ctx
    return ctx


_TLS: dict = {}  # contexts by settings: a task's connections share one (loading the CA costs milliseconds)


class Connection:
    """One socket to a broker, one request at a time (Fetch v4); over TLS
    and logged in with SASL where ``conf`` (librdkafka's settings) says so."""

    def __init__(self, host: str, port: int, timeout: float, conf: dict | None = None):
        import ssl

        conf = conf or {}
        proto = str(conf.get("security.protocol", "plaintext")).lower()
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise Unsupported(f"connecting to {host}:{port}: {e}", "connecting to the broker") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0
        try:
            if proto in ("ssl", "sasl_ssl"):
                self.sock = _tls(conf).wrap_socket(self.sock, server_hostname=host)
        except (ssl.SSLError, OSError) as e:
            self.sock.close()
            raise Unsupported(f"TLS with {host}:{port}: {e}", "a TLS handshake") from None
        if proto.startswith("sasl_"):
            try:
                self._login(str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms"))).upper(),
                            str(conf.get("sasl.username", "")), str(conf.get("sasl.password", "")))
            except BaseException:
                self.sock.close()
                raise

    def _login(self, mechanism: str, user: str, password: str) -> None:
        """SASL (KIP-152): SaslHandshake v1 names the mechanism, then its
        messages go in SaslAuthenticate v0 requests — PLAIN's one, or
        SCRAM's two (RFC 5802, by ``scramp``)."""
        r = _Reader(self._call(17, 1, _string(mechanism)), 4)
        err = r.int16()
        if err:
            offered = [r.string() for _ in range(r.int32())]
            raise Unsupported(f"the broker does not take SASL {mechanism} (it takes {offered})",
                              f"SASL {mechanism} not enabled on the broker")
        if mechanism == "PLAIN":
            self._authenticate(b"\x00" + user.encode() + b"\x00" + password.encode())
            return
        import scramp

        client = scramp.ScramClient([mechanism], user, password)
        try:
            client.set_server_first(self._authenticate(client.get_client_first().encode()).decode())
            client.set_server_final(self._authenticate(client.get_client_final().encode()).decode())
        except scramp.ScramException as e:
            raise Unsupported(f"SASL {mechanism}: {e}", f"SASL {mechanism} login") from None

    def _authenticate(self, message: bytes) -> bytes:
        """One SaslAuthenticate v0 round: the broker's answer."""
        r = _Reader(self._call(36, 0, struct.pack(">i", len(message)) + message), 4)
        err, why = r.int16(), r.string()
        if err:
            raise Unsupported(f"SASL login refused by the broker (error {err}: {why})", "SASL login refused")
        n = r.int32()
        return bytes(r.buf[r.pos: r.pos + max(n, 0)])

    def close(self) -> None:
        self.sock.close()

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise Unsupported("the broker closed the connection")
            got += k
        return buf

    def _call(self, api: int, version: int, body: bytes) -> bytearray:
        """One request (header v1: api key, version, correlation id, client id) and its response's body."""
        self.corr += 1
        head = struct.pack(">hhih", api, version, self.corr, 5) + b"gpuwm"
        try:
            self.sock.sendall(struct.pack(">i", len(head) + len(body)) + head + body)
            size, = struct.unpack(">i", self._read(4))
            buf = self._read(size)
        except OSError as e:
            raise Unsupported(f"a request to the broker: {e}", "a request to the broker") from None
        if struct.unpack_from(">i", buf, 0)[0] != self.corr:
            raise Unsupported("a response to another request")
        return buf

    def leaders(self, topics: list[str]) -> dict[tuple[str, int], tuple[str, int]]:
        """``{(topic, partition): (host, port) of its leader}`` (Metadata v4)."""
        body = struct.pack(">i", len(topics)) + b"".join(_string(t) for t in topics) + b"\x00"
        r = _Reader(self._call(3, 4, body), 8)  # after the correlation id and throttle time
        brokers = {}
        for _ in range(r.int32()):
            node, host, port = r.int32(), r.string(), r.int32()
            r.string()  # rack
            brokers[node] = (host, port)
        r.string()  # cluster id
        r.int32()  # controller
        out = {}
        for _ in range(r.int32()):
            err, name = r.int16(), r.string()
            r.pos += 1  # is_internal
            for _ in range(r.int32()):
                perr, part, leader = r.int16(), r.int32(), r.int32()
                for _ in range(2):  # replicas, in-sync replicas
                    n = r.int32()
                    r.pos += 4 * n
                if not err and not perr and leader in brokers:
                    out[name, part] = brokers[leader]
        return out

    def fetch(self, topic: str, partition: int, offset: int, *, committed: bool, max_bytes: int,
              wait_ms: int) -> tuple[int, int, list[tuple[int, int]], np.ndarray]:
        """(error code, last stable offset, aborted transactions as
        ``(producer id, first offset)``, the record batches' bytes) (Fetch v4)."""
        body = (struct.pack(">iiiib", -1, wait_ms, 1, max_bytes, 1 if committed else 0)
                + struct.pack(">i", 1) + _string(topic) + struct.pack(">iiqi", 1, partition, offset, max_bytes))
        buf = self._call(1, 4, body)
        r = _Reader(buf, 8)
        if r.int32() != 1 or r.string() != topic or r.int32() != 1 or r.int32() != partition:
            raise Unsupported("a fetch response for another partition")
        err, _, lso, n_aborted = r.int16(), r.int64(), r.int64(), r.int32()
        aborted = [struct.unpack_from(">qq", buf, r.pos + 16 * i) for i in range(max(n_aborted, 0))]
        r.pos += 16 * max(n_aborted, 0)
        size = r.int32()
        return err, lso, aborted, np.frombuffer(buf, np.uint8, max(size, 0), r.pos)


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class _Reader:
    """Big-endian fields of a response, read in turn."""

    def __init__(self, buf: bytearray, pos: int):
        self.buf, self.pos = buf, pos

    def _get(self, fmt: str, size: int):
        v, = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def int16(self) -> int:
        return self._get(">h", 2)

    def int32(self) -> int:
        return self._get(">i", 4)

    def int64(self) -> int:
        return self._get(">q", 8)

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        self.pos += n
        return bytes(self.buf[self.pos - n: self.pos]).decode()


def leaders(bootstrap: str, topics: list[str], timeout: float,
            conf: dict | None = None) -> dict[tuple[str, int], tuple[str, int]]:
    """:meth:`Connection.leaders` from the first of the bootstrap servers
    (``host:port,...``) that answers (``conf``: the connection's TLS and SASL settings)."""
    why = Unsupported("no bootstrap server")
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            conn = Connection(host.strip("[]"), int(port), timeout, conf)
        except Unsupported as e:
            why = e
            continue
        except ValueError as e:
            why = Unsupported(f"bootstrap server {server!r}: {e}", "a bootstrap server gpuwm does not read")
            continue
        try:
            return conn.leaders(topics)
        finally:
            conn.close()
    raise why


def batches(data: np.ndarray, committed: bool, aborted: list[tuple[int, int]],
            until: int | None = None, codec: dict | None = None) -> tuple[list[tuple], int | None]:
    """The complete record batches in ``data`` (up to the first that begins
    at or after ``until``) whose records a consumer sees, as ``(records'
    bytes, base offset, count, base timestamp, max timestamp, log-append
    time, last offset delta)``, and the offset to fetch from next: after the last complete
    batch, ``until`` once a batch begins there or later, None where no
    batch is complete. As the Java consumer, per fetch: a
    producer is inside an aborted transaction (the fetch lists it) until
    its abort marker. ``codec`` (where given) gets the compressed batches'
    ``codec_bytes`` (as fetched), ``codec_out_bytes`` (inflated) and
    ``codec_s`` (the time inflating them)."""
    raw = data.data if data.flags.c_contiguous else data.tobytes()
    out, nxt, pos = [], None, 0
    aborting: set[int] = set()
    pending = sorted(aborted, key=lambda a: a[1])
    while pos + 61 <= len(data):
        (base, length, _, magic, _, attrs, last_delta, base_ts, max_ts, pid, _, _,
         count) = _BATCH.unpack_from(raw, pos)
        end = pos + 12 + length
        if magic != 2:
            raise Unsupported(f"message format {magic}", "message format < 2 (Kafka < 0.11)")
        if until is not None and base >= until:  # the range is read (its last offsets may not exist: compacted)
            return out, until
        if end > len(data):
            break  # the fetch's last batch, cut at its size limit
        nxt = base + last_delta + 1
        control, transactional = bool(attrs & 0x20), bool(attrs & 0x10)
        if committed and pid >= 0:
            while pending and pending[0][1] <= base + last_delta:
                aborting.add(pending.pop(0)[0])
            if control:
                if _marker_type(bytes(raw[pos + 61: min(end, pos + 125)])) == 0:
                    aborting.discard(pid)
                pos = end
                continue
            if transactional and pid in aborting:
                pos = end
                continue
        if not control and count > 0:
            body = data[pos + 61: end]
            if attrs & 0x7:
                body = inflate(attrs & 0x7, body, codec)
            out.append((body, base, count, base_ts, max_ts, bool(attrs & 0x8), last_delta))
        pos = end
    return out, nxt


#: Kafka's codec ids (the batch attributes' low 3 bits), by name
CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_XERIAL = b"\x82SNAPPY\x00"  # Kafka's Java producer: snappy-java's stream, blocks of (int32 length, raw snappy)


def inflate(codec: int, body: np.ndarray, stats: dict | None = None) -> np.ndarray:
    """A compressed batch's records (``body``: the bytes after its header)
    inflated, as Kafka's consumers do: codec 1 gzip, 2 snappy (raw, or
    xerial-framed), 3 lz4 (frame format), 4 zstd (one frame or more)."""
    import cramjam

    name = CODECS.get(codec)
    if name is None:
        raise Unsupported(f"compression codec {codec}")
    t0 = time.perf_counter()
    src = body if body.flags.c_contiguous else np.ascontiguousarray(body)
    try:
        if codec == 2 and bytes(src[:8]) == _XERIAL:
            parts, pos = [], 16  # after the magic, the version and the compatible version
            while pos + 4 <= len(src):
                n = int.from_bytes(src[pos: pos + 4].tobytes(), "big")
                if pos + 4 + n > len(src):
                    raise Unsupported("a snappy block past its batch")
                parts.append(np.frombuffer(cramjam.snappy.decompress_raw(src[pos + 4: pos + 4 + n]), np.uint8))
                pos += 4 + n
            out = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        else:
            got = {1: cramjam.gzip.decompress, 2: cramjam.snappy.decompress_raw, 3: cramjam.lz4.decompress,
                   4: cramjam.zstd.decompress}[codec](src)
            out = np.frombuffer(got, np.uint8)
    except cramjam.DecompressionError as e:
        raise Unsupported(f"a {name} batch that does not inflate: {e}", f"a {name} batch that does not inflate") from None
    if stats is not None:
        stats["codec_bytes"] = stats.get("codec_bytes", 0) + len(src)
        stats["codec_out_bytes"] = stats.get("codec_out_bytes", 0) + len(out)
        stats["codec_s"] = stats.get("codec_s", 0.0) + time.perf_counter() - t0
    return out


def _marker_type(record: bytes) -> int:
    """A control record's type (0 abort, 1 commit): its key is (version, type), two int16."""
    pos = 0
    for field in range(5):  # length, attributes (one byte), timestamp delta, offset delta, key length
        if field == 1:
            pos += 1
            continue
        value = shift = 0
        while True:
            b = record[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
    key_len = (value >> 1) ^ -(value & 1)
    return int.from_bytes(record[pos + 2: pos + 4], "big") if key_len >= 4 else -1


def _varint(buf: np.ndarray, at: np.ndarray, width: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints at positions ``at`` of ``buf``: (values, byte sizes)."""
    value = np.zeros(len(at), np.uint64)
    size = np.zeros(len(at), np.int64)
    live = np.ones(len(at), bool)
    last = len(buf) - 1
    for i in range(width):
        b = buf[np.minimum(at + i, last)]
        value |= np.where(live, (b & 0x7F).astype(np.uint64) << np.uint64(7 * i), np.uint64(0))
        size += live
        live &= b >= 0x80
        if not live.any():
            break
    if live.any():
        raise Unsupported("a varint past its width")
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return signed, size


def records(segs: list[tuple], need: set) -> dict[str, np.ndarray | pa.Array]:
    """The records of the batches :func:`batches` kept, decoded together:
    ``offset``, ``timestamp`` (ms), ``timestampType`` (Spark's: 0 create,
    1 log append), ``segment`` (the index of the record's batch in
    ``segs``), and ``key``, ``value``, ``headers`` (a list of ``(key,
    value)`` pairs) as Arrow arrays where ``need`` names them."""
    buf = np.concatenate([s[0] for s in segs]) if len(segs) > 1 else segs[0][0]
    counts = np.array([s[2] for s in segs], np.int64)
    lens = np.array([len(s[0]) for s in segs], np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    n = int(counts.sum())
    # every position that could start a record: a varint (its length) followed by a 0 byte (its attributes)
    cont = buf >= 0x80
    zeros = np.flatnonzero(buf == 0)
    zeros = zeros[zeros > 0]
    width = np.zeros(len(buf), np.uint8)  # at a candidate: its varint's bytes (a varint's end fixes its start)
    ok = ~cont[zeros - 1]
    for k in range(1, 6):
        width[zeros[ok] - k] = k
        z = zeros - k - 1
        ok = ok & (z >= 0) & cont[np.maximum(z, 0)]
    cand = np.flatnonzero(width)
    csize = width[cand].astype(np.int64)
    length, _ = _varint(buf, cand, 5)
    target = cand + csize + length
    link = np.searchsorted(cand, target)
    hit = (link < len(cand)) & (cand[np.minimum(link, len(cand) - 1)] == target)
    sentinel = len(cand)
    link = np.append(np.where(hit, link, sentinel), sentinel)
    first = np.searchsorted(cand, starts)
    if not ((first < len(cand)) & (cand[np.minimum(first, len(cand) - 1)] == starts)).all():
        raise Unsupported("a batch whose first record does not frame")
    seg = np.repeat(np.arange(len(segs)), counts)
    index = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    at = first[seg]
    bit = 0
    while (1 << bit) <= int(counts.max()) - 1:
        step = ((index >> bit) & 1).astype(bool)
        at = np.where(step, link[at], at)
        link = link[link]
        bit += 1
    if (at == sentinel).any():
        raise Unsupported("records that do not frame")
    rec, rsize, rlen = cand[at], csize[at], length[at]
    q = rec + rsize + 1  # after the attributes byte
    ts_delta, k = _varint(buf, q)
    q = q + k
    off_delta, k = _varint(buf, q, 5)
    q = q + k
    # offset deltas rise within a batch, to its last (compaction leaves gaps: not always the index)
    later = np.flatnonzero(index[1:] > 0) + 1
    last_delta = np.array([s[6] for s in segs], np.int64)[seg]
    if ((off_delta < index) | (off_delta > last_delta)).any() or (off_delta[later] <= off_delta[later - 1]).any():
        raise Unsupported("offset deltas that do not rise within their batch")
    key_len, k = _varint(buf, q, 5)
    key_at = q + k
    q = key_at + np.maximum(key_len, 0)
    value_len, k = _varint(buf, q, 5)
    value_at = q + k
    q = value_at + np.maximum(value_len, 0)
    n_headers, k = _varint(buf, q, 5)
    q = q + k
    headers = []
    for h in range(int(n_headers.max()) if n_headers.size else 0):
        has = np.flatnonzero(n_headers > h)
        p = q[has]
        hk_len, k = _varint(buf, p, 5)
        hk_at = p + k
        p = hk_at + np.maximum(hk_len, 0)
        hv_len, k = _varint(buf, p, 5)
        hv_at = p + k
        q[has] = hv_at + np.maximum(hv_len, 0)
        headers.append((has, hk_at, hk_len, hv_at, hv_len))
    if not (q == rec + rsize + rlen).all() or (n_headers < 0).any():
        raise Unsupported("records whose fields do not add up to their length")
    base = np.array([s[1] for s in segs], np.int64)[seg]
    log_append = np.array([s[5] for s in segs], bool)[seg]
    stamp = np.where(log_append, np.array([s[4] for s in segs], np.int64)[seg],
                     np.array([s[3] for s in segs], np.int64)[seg] + ts_delta)
    out: dict = {"offset": base + off_delta, "timestamp": stamp, "timestampType": log_append.astype(np.int32),
                 "segment": seg}
    if "key" in need:
        out["key"] = _binary(buf, key_at, key_len)
    if "value" in need:
        out["value"] = _binary(buf, value_at, value_len)
    if "headers" in need:
        out["headers"] = _headers(buf, n, n_headers, headers)
    return out


def _binary(buf: np.ndarray, at: np.ndarray, length: np.ndarray, typ: pa.DataType = pa.binary()) -> pa.Array:
    """The byte ranges ``[at, at + length)`` of ``buf`` (in order, apart)
    as one Arrow array (length -1: null): over ``buf`` as it is, the
    ranges and the bytes between them are alternate elements of one
    array, and Arrow's ``take`` of every other one copies the ranges'."""
    n = len(at)
    size = np.maximum(length, 0)
    if len(buf) >= 1 << 31:
        raise Unsupported("over 2 GiB of records in one fetch")
    if not size.any():  # no bytes at all (keys that are all null, say)
        got = pa.Array.from_buffers(typ, n, [None, pa.py_buffer(np.zeros(n + 1, np.int32)), pa.py_buffer(b"")])
    else:
        bounds = np.empty(2 * n, np.int32)
        bounds[0::2], bounds[1::2] = at, at + size
        whole = pa.Array.from_buffers(typ, 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(buf)])
        got = whole.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    nulls = length < 0
    if not nulls.any():
        return got
    valid = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [valid, *got.buffers()[1:]], null_count=int(nulls.sum()))


def _headers(buf: np.ndarray, n: int, n_headers: np.ndarray, found: list) -> pa.Array:
    """Spark's ``headers`` column: per record a list of (key string, value
    binary) structs, null where a record has none."""
    typ = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    total = int(n_headers.sum())
    # the h-th header of record r sits at offsets[r] + h in the flat struct column
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(n_headers, out=offsets[1:])
    k_at, k_len, v_at, v_len = (np.empty(total, np.int64) for _ in range(4))
    for h, (has, hk_at, hk_len, hv_at, hv_len) in enumerate(found):
        i = offsets[has] + h
        k_at[i], k_len[i], v_at[i], v_len[i] = hk_at, hk_len, hv_at, hv_len
    flat = pa.StructArray.from_arrays([_binary(buf, k_at, k_len, pa.string()), _binary(buf, v_at, v_len)],
                                      names=["key", "value"])
    none = n_headers == 0
    valid = pa.py_buffer(np.packbits(~none, bitorder="little")) if none.any() else None
    return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(offsets.astype(np.int32))], children=[flat],
                                 null_count=int(none.sum()))
