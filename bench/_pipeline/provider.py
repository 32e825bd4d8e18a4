"""The provider of the pipeline benchmark: a loopback refund API in a thread of the bench."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Provider"]


class Provider:
    """A loopback refund API: ``status`` for every refund, created at first read."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.created: dict[str, int] = {}
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in one write (buffered, flushed after each request), with
            # Nagle off: written apart, the body waited on the client's delayed ACK.
            wbufsize = -1
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                refund_id = self.path.rsplit("/", 1)[-1]
                created = provider.created.setdefault(refund_id, int(time.time()))
                body = json.dumps(
                    {
                        "id": refund_id,
                        "object": "refund",
                        "amount": 1000,
                        "currency": "usd",
                        "charge": f"ch_{refund_id[3:]}",
                        "status": provider.status,
                        "created": created,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
