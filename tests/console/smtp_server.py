"""A small real SMTP server on loopback for the notification-mail tests: Django's SMTP backend (smtplib) talks to it
over TCP, so what the tests see is what a mail server would.

It can misbehave the ways a real one does: refuse the next connections for now (``421`` greeting), refuse some
recipients for good (``550``), drop the connection after some messages, or never greet at all (a hung server).
"""

from __future__ import annotations

import socketserver
import threading
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message


@dataclass
class Received:
    sender: str
    to: list[str]
    message: Message

    @property
    def subject(self) -> str:
        return str(self.message["Subject"])


@dataclass
class Behaviour:
    refuse_connections: int = 0  # the next N connections get "421 try again later" and are closed
    refused_for_good: set[str] = field(default_factory=set)  # RCPT TO these: "550 no such user"
    drop_after: int | None = None  # close the connection after this many messages (without a reply to the next)
    connections: int = 0  # connections seen (refused ones too)


class _Handler(socketserver.StreamRequestHandler):
    timeout = 30

    def _reply(self, line: str) -> None:
        self.wfile.write((line + "\r\n").encode())

    def handle(self) -> None:
        server: SMTPTestServer = self.server  # type: ignore[assignment]
        b = server.behaviour
        with server.lock:
            b.connections += 1
            refuse = b.refuse_connections > 0
            if refuse:
                b.refuse_connections -= 1
        if refuse:
            self._reply("421 4.3.2 service not available, try again later")
            return
        self._reply("220 smtp.test ESMTP")
        sender, to, taken = "", [], 0
        while line := self.rfile.readline():
            command = line.decode("utf-8", "replace").strip()
            verb = command.split(" ", 1)[0].split(":", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self._reply("250 smtp.test")
            elif verb == "MAIL":
                if b.drop_after is not None and taken >= b.drop_after:
                    return  # the connection drops mid-conversation
                sender, to = command.split(":", 1)[1].strip().strip("<>"), []
                self._reply("250 2.1.0 ok")
            elif verb == "RCPT":
                address = command.split(":", 1)[1].strip().strip("<>")
                if address in b.refused_for_good:
                    self._reply("550 5.1.1 no such user")
                else:
                    to.append(address)
                    self._reply("250 2.1.5 ok")
            elif verb == "DATA":
                self._reply("354 end with <CRLF>.<CRLF>")
                data = []
                while (part := self.rfile.readline()) not in (b".\r\n", b""):
                    data.append(part[1:] if part.startswith(b"..") else part)
                with server.lock:
                    server.received.append(Received(sender, list(to), message_from_bytes(b"".join(data))))
                taken += 1
                self._reply("250 2.0.0 queued")
            elif verb == "RSET":
                sender, to = "", []
                self._reply("250 2.0.0 ok")
            elif verb == "NOOP":
                self._reply("250 2.0.0 ok")
            elif verb == "QUIT":
                self._reply("221 2.0.0 bye")
                return
            else:
                self._reply("502 5.5.2 command not implemented")


class SMTPTestServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, behaviour: Behaviour | None = None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behaviour = behaviour or Behaviour()
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, name="smtp-test-server", daemon=True)

    @property
    def port(self) -> int:
        return self.server_address[1]

    def __enter__(self) -> SMTPTestServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


class HungServer:
    """A port that takes connections (the kernel's backlog accepts them) and never says a word: the SMTP client
    waits for a greeting until its timeout, as with a mail server that hangs."""

    def __init__(self):
        import socket

        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self.port = self._socket.getsockname()[1]

    def __enter__(self) -> HungServer:
        return self

    def __exit__(self, *exc) -> None:
        self._socket.close()
