"""What the driver's JVM prints while it starts, kept off the terminal.

The JVM that ``SparkSession.builder.getOrCreate()`` launches inherits this
process's stdout and stderr, and prints a dozen lines a user of gpuwm did
not ask for before the first batch: the JDK's ``WARNING: Using incubator
modules``, Spark's log4j profile and default level, the hostname and
native-Hadoop warnings, and — with ``spark.jars.packages`` — Ivy's
resolution report. :func:`quiet_start` gives the JVM a pipe for each
instead; a thread per pipe drops what arrives until the JVM prints a marker
after the session is up (Spark's log level is ERROR from then on), and
forwards the rest to where it would have gone. If the start fails, what it
printed is attached to the error (a note its traceback shows; ``gpuwm
run`` names the reason in its one line), so it is not lost; ``show=True``
(``gpuwm --debug``, ``GPUWM_JVM_START=show``) leaves the JVM's output as it
is.

After a Ctrl-C, :func:`hush` drops what the JVM prints from then on: the
query it stops can print a Java trace from a thread it interrupts, after
``gpuwm run``'s last line.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import uuid

ENV = "GPUWM_JVM_START"


class _Relay(threading.Thread):
    """Copies the JVM's output from ``read_fd`` to ``out_fd``, from the line
    after ``marker`` on; keeps what came before for :meth:`held`."""

    def __init__(self, read_fd: int, out_fd: int, marker: bytes):
        super().__init__(daemon=True, name="gpuwm-jvm-output")
        self.read_fd, self.out_fd, self.marker = read_fd, out_fd, marker
        self.started_up = threading.Event()
        self.hushed = threading.Event()
        self._held: list[bytes] = []

    def run(self) -> None:
        with os.fdopen(self.read_fd, "rb", buffering=0) as pipe:
            for line in iter(pipe.readline, b""):
                if self.hushed.is_set():
                    continue
                if self.started_up.is_set():
                    os.write(self.out_fd, line)
                elif line.rstrip(b"\r\n") == self.marker:
                    self.started_up.set()
                else:
                    self._held.append(line)

    def held(self) -> bytes:
        return b"".join(self._held)


@contextlib.contextmanager
def quiet_start(show: bool = False):
    """``with quiet_start() as up: spark = ...getOrCreate(); up(spark)`` —
    the JVM started inside prints nothing until ``up(spark)`` (after
    the log level is set); nothing changes where a JVM already runs."""
    from pyspark import SparkContext

    if show or os.environ.get(ENV) == "show" or SparkContext._gateway is not None:
        yield lambda spark: None
        return
    marker = f"gpuwm-jvm-started-{uuid.uuid4().hex}".encode()
    relays: list[_Relay] = []
    saved: list[tuple[int, int]] = []
    for fd in (1, 2):
        (sys.stdout if fd == 1 else sys.stderr).flush()
        r, w = os.pipe()
        keep = os.dup(fd)  # where the JVM's output goes once it is up
        os.dup2(w, fd)  # the JVM, launched now, inherits the pipe
        os.close(w)
        relays.append(_Relay(r, keep, marker))
        saved.append((fd, keep))
    for relay in relays:
        relay.start()
    _relays[:] = relays
    restored = False

    def restore() -> None:
        nonlocal restored
        if not restored:
            for fd, keep in saved:
                os.dup2(keep, fd)  # this process writes where it did; the JVM keeps its pipes
            restored = True

    def up(spark) -> None:
        restore()
        system = spark._jvm.java.lang.System
        for stream in (system.out, system.err):
            stream.println(marker.decode())
            stream.flush()

    try:
        yield up
    except BaseException as e:
        restore()
        deadline = time.monotonic() + 5  # a JVM that exited closes its pipes: all it printed has been read
        for relay in relays:
            relay.join(timeout=max(0.0, deadline - time.monotonic()))
        held = b"".join(relay.held() for relay in relays).decode(errors="replace").strip()
        for relay in relays:
            relay.started_up.set()  # from now on (a JVM still running), pass everything on
        if held:  # shown with the traceback (gpuwm run: its one line names the reason, its log has all)
            e.__notes__ = [*getattr(e, "__notes__", []), f"{NOTE}\n{held}"]
        raise
    finally:
        restore()


NOTE = "what Spark's JVM printed while it started:"

_relays: list[_Relay] = []  # the running JVM's, where quiet_start launched it


def hush() -> None:
    """From now on, drop what the JVM prints (where :func:`quiet_start`
    launched it; a JVM started with ``show`` keeps its output)."""
    for relay in _relays:
        relay.hushed.set()


def start_failure(e: BaseException) -> str | None:
    """The reason a JVM that did not start gave (its last exception or
    ``Error:`` line), from what :func:`quiet_start` attached to ``e``."""
    held = next((n for n in getattr(e, "__notes__", []) if n.startswith(NOTE)), None)
    if held is None:
        return None
    lines = [ln.strip() for ln in held.splitlines()[1:] if ln.strip()]
    why = [ln for ln in lines if ln.startswith(("Exception in thread", "Error:", "Caused by:"))] or lines[-1:]
    return why[-1].split('" ', 1)[-1] if why and why[-1].startswith("Exception in thread") else (why or [""])[-1]
