"""A TCP proxy on loopback that a test can cut: the way to take Redis (or anything) away from a process without
touching the real server, which other test runs share.

``cut()`` closes every proxied connection and closes the listening socket, so new connections are refused
(ECONNREFUSED, as when the server is down); ``restore()`` listens again on the same port. ``hang()`` is the
other outage: connections are accepted but nothing is forwarded (a partitioned network)."""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit, urlunsplit


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, port: int = 0):
        self.target = (target_host, target_port)
        self.port = port
        self._listener: socket.socket | None = None
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._lock = threading.Lock()
        self._hanging = False
        self._stopped = False
        self.accepted = 0

    @classmethod
    def for_url(cls, url: str) -> TcpProxy:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 6379)

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)
        auth = netloc[0] + "@" if len(netloc) == 2 else ""
        return urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{self.port}"))

    # --- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        listener.settimeout(0.05)  # the accept loop notices a cut within this
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept_loop, args=(listener,), daemon=True, name="proxy-accept").start()
        return self

    def cut(self) -> None:
        """Redis is gone: live connections are closed, new ones refused."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        self._close_pairs()

    def hang(self) -> None:
        """Redis is unreachable: live connections are closed, new ones accepted and never answered."""
        self._hanging = True
        self._close_pairs()

    def restore(self) -> None:
        self._hanging = False
        if self._listener is None:
            self.start()

    def stop(self) -> None:
        self._stopped = True
        self.cut()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- forwarding ------------------------------------------------------------------------------------------

    def _close_pairs(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, set()
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _accept_loop(self, listener: socket.socket) -> None:
        while self._listener is listener and not self._stopped:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed by cut()
                return
            self.accepted += 1
            if self._hanging:
                with self._lock:  # held open, unanswered, until restore/cut closes it
                    self._pairs.add((client, client))
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._pairs.add((client, upstream))
            pair = (client, upstream)
            for src, dst in (pair, pair[::-1]):
                threading.Thread(target=self._pump, args=(src, dst, pair), daemon=True, name="proxy-pump").start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or self._hanging:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):  # either side closing ends both directions
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._lock:
            mine = pair in self._pairs
            self._pairs.discard(pair)
        if mine:  # the first pump to end closes the pair (a cut closes it itself)
            for s in pair:
                s.close()
