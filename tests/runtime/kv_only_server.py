#!/usr/bin/python3
"""A rendezvous server that speaks Horovod's key-value protocol and nothing else, as Horovod's own
RendezvousServer or an old hvd-rendezvous does: PUT, GET and DELETE (a no-op) of /<scope>/<key>; any other path is
404, POST is not implemented (501). Workers rendezvous through it by polling.

Usage: kv_only_server.py LOG [404|drop]. Prints its port on stdout once listening; writes "METHOD PATH" to
LOG for every request whose path is not /<scope>/<key> (status reports, among others), one line each, and
answers it with 404, or ("drop", as Horovod's server does: its handler raises on such a path) closes the
connection without an answer.
"""
import http.server
import sys
import threading

store = {}
lock = threading.Lock()
log = open(sys.argv[1], "a", buffering=1)
drop = len(sys.argv) > 2 and sys.argv[2] == "drop"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _key(self):
        parts = self.path.split("/")
        if len(parts) != 3 or not parts[1] or not parts[2]:
            with lock:
                log.write(f"{self.command} {self.path}\n")
            return None
        return (parts[1], parts[2])

    def _answer(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        value = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        key = self._key()
        if key is None and drop:
            self.close_connection = True
            return
        if key is None:
            return self._answer(404)
        with lock:
            store[key] = value
        self._answer(200)

    def do_GET(self):
        key = self._key()
        with lock:
            value = store.get(key) if key else None
        if value is None:
            return self._answer(404)
        self._answer(200, value)

    def do_DELETE(self):
        # Horovod's finalize: the keys stay until every rank of the scope finished; here, until the end.
        self._answer(200 if self._key() else 404)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
