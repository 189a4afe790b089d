"""What the test servers on loopback share (:mod:`tests.s3_server`,
:mod:`tests.kafka_broker`): a free port, waiting until the started process
answers, and stopping it."""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Callable


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports: each socket held bound until all
    are (one at a time, the OS may hand the same port out twice — a broker's
    two listeners once got one port, and Kafka refused to format)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


class LoopbackServer:
    """A server process (``self.proc``, its output in ``self._log``) on
    ``127.0.0.1:self.port``; ``with server:`` starts and stops it."""

    #: what the server is called in an error
    what = "the server"
    proc: subprocess.Popen | None = None
    port: int

    def start(self, timeout: float = 60) -> "LoopbackServer":
        raise NotImplementedError

    def _wait_ready(self, ready: Callable[[], object], timeout: float, pause: float) -> None:
        """Until the port takes a connection and ``ready()`` returns: the
        process exiting first is an error naming its log; no answer within
        ``timeout`` stops it and raises the last error."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.what} exited with {self.proc.returncode}: see {self._log.name}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                ready()
                return
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(pause)

    def stop(self, grace: float = 30) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
