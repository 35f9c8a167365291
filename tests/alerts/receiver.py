"""A real local HTTP server that receives webhooks (a thread, a free port) and answers with a
scripted sequence of statuses (the last one repeats)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    statuses: list[int]
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_status(self) -> int:
        with self.lock:
            index = len(self.requests) - 1
            return self.statuses[min(index, len(self.statuses) - 1)]

    def count(self) -> int:
        with self.lock:
            return len(self.requests)


@contextmanager
def webhook_receiver(statuses: list[int] | None = None) -> Iterator[Receiver]:
    receiver = Receiver(url="", statuses=statuses or [200])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            with receiver.lock:
                receiver.requests.append(
                    Received(path=self.path, headers=dict(self.headers.items()), body=body)
                )
            status = receiver.next_status()
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/ezat"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
