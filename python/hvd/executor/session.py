"""The driver's side of one started Executor: the listening socket, one connection per rank, the calls in flight.

Contract. Session(engine, num_workers, settings) listens on a fresh TCP port (all interfaces) with a fresh token;
connect() starts the engine and accepts the ranks' hellos until every rank is connected, the engine ended, or
settings.start_timeout_s passed (ExecutorError naming the missing ranks). submit() sends a call to some ranks and
returns a _Call whose futures resolve, per rank, to the unpickled return value or a WorkerError; wait() collects a
call in the caller's thread, running the callbacks there with rank 0's sent values, in order. close() stops the
workers ("stop", then closing the connections, then the engine's stop with a 10 s grace) and is idempotent.

Failures. A connection that ends or breaks while the session is open means a worker died or was cut off: within
about 1.5 s (time for the engine to say how it ended) every pending future fails with one ExecutorError naming the
rank, and the session is dead: later submits raise that error at once, and the workers are torn down in the
background. The engine ending does the same. A call on which one rank raised while others are still busy
settings.timeout_s later (blocked in a collective the failed rank never joined) also kills the session, with an
ExecutorError naming the busy ranks and the WorkerError as its cause. A hello with a wrong token or a bad identity
is refused: the connection is closed and one line is written to stderr.

Threading. One reader thread per connection resolves futures and queues sent values; one monitor thread watches
the engine and the failure deadlines (it wakes every 0.2 s); calls are sent to all their ranks under one lock,
so every rank receives the calls in the same order.
"""

import atexit
import itertools
import pickle
import queue
import secrets
import select
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import Future

from hvd.executor import protocol
from hvd.executor.callbacks import CallbackRelay
from hvd.executor.errors import ExecutorError, WorkerError

_RESTART = "start a new Executor (or call start() again)"
_HELLO_TIMEOUT_S = 10.0
_LOSS_EXPLAIN_S = 1.5
_MONITOR_PERIOD_S = 0.2
_STOP_GRACE_S = 10.0

_live = set()
_live_lock = threading.Lock()


def _close_live_sessions():
    with _live_lock:
        sessions = list(_live)
    for session in sessions:
        session.close()


atexit.register(_close_live_sessions)


def _listen() -> socket.socket:
    """A listening socket on every interface (IPv4 and, where the host has it, IPv6), on a free port."""
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True, backlog=128)
        except OSError:
            pass
    return socket.create_server(("0.0.0.0", 0), backlog=128)


class _Conn:
    def __init__(self, sock: socket.socket, identity: dict):
        self.sock = sock
        self.identity = identity
        self.rank = identity["rank"]
        self.lock = threading.Lock()
        self.reader = None

    def describe(self) -> str:
        return f"rank {self.rank} (pid {self.identity['pid']} on {self.identity['host']})"

    def send(self, message: tuple) -> None:
        with self.lock:
            protocol.send_frame(self.sock, message)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class _Call:
    """One call on some ranks: a future per rank; events: ("send", payload) of rank 0, then ("done",)."""

    def __init__(self, call_id: int, kind: str, ranks: list, what: str, wants_sends: bool):
        self.id = call_id
        self.wants_sends = wants_sends
        self.kind = kind
        self.what = what
        self.ranks = list(ranks)
        self.futures = {rank: Future() for rank in ranks}
        self.pending = set(ranks)
        self.events = queue.SimpleQueue()
        self.failures = []  # (rank, WorkerError) in the order they reached the driver
        self.first_failure_at = None


# A rank that failed because it lost a peer reports a consequence: the peer's death (its connection's end, hvdrun's
# account) reaches the driver within this time, and is the error the call ends with.
_PEER_LOSS_GRACE_S = 2.0


def _grace(call: "_Call", timeout: float) -> float:
    """How long after its first failure a call waits for its other ranks."""
    first = call.failures[0][1] if call.failures else None
    if first is not None and first.type_name.endswith("PeerLostError"):
        return max(timeout, _PEER_LOSS_GRACE_S)
    return timeout


def _settle(future: Future, value=None, error: BaseException = None) -> None:
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except Exception:
        pass  # cancelled by the user


class Session:
    """See the module docstring."""

    def __init__(self, engine, num_workers: int, settings):
        self.engine = engine
        self.num_workers = num_workers
        self.settings = settings
        self.token = secrets.token_hex(16)
        self.listener = _listen()
        self.port = self.listener.getsockname()[1]
        self.conns = {}
        self.calls = {}
        self.dead = None
        self.lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._closing = False
        self._closed = False
        self._losing = False
        self._ids = itertools.count(1)
        self._path_sent = None
        self._wake = threading.Event()
        self._monitor = None
        self._started = False
        with _live_lock:
            _live.add(self)

    # ---- start -------------------------------------------------------------------------------------------
    def connect(self, env: dict) -> None:
        """Starts the engine and waits for every rank's hello. Raises ExecutorError (the session is closed)."""
        self._started = True
        self.engine.start(num_workers=self.num_workers, driver_port=self.port, token=self.token, env=env,
                          settings=self.settings)
        deadline = time.monotonic() + self.settings.start_timeout_s
        # The loop sleeps until a connection comes or a handshake thread registered a rank (a byte on
        # _joined), and at most 0.25 s, to look at the engine and the deadline.
        self.listener.setblocking(False)
        self._joined, joined = socket.socketpair()
        try:
            self._accept_all(deadline, joined)
        finally:
            with self.lock:
                self._joined.close()
            joined.close()
        self.listener.close()
        for conn in self.conns.values():
            conn.reader = threading.Thread(target=self._read, args=(conn,), daemon=True,
                                           name=f"hvd-executor-rank-{conn.rank}")
            conn.reader.start()
        self._monitor = threading.Thread(target=self._watch, daemon=True, name="hvd-executor-monitor")
        self._monitor.start()

    def _accept_all(self, deadline: float, joined: socket.socket) -> None:
        """Accepts connections (each handshake on a thread of its own) until every rank said hello."""
        while True:
            with self.lock:
                if len(self.conns) == self.num_workers:
                    return
                missing = [r for r in range(self.num_workers) if r not in self.conns]
            status = self.engine.exit_status()
            if status is not None:
                raise ExecutorError(f"hvd.Executor: the workers ended before rank(s) {_ranks(missing)} connected "
                                    f"back: {status}; {_RESTART}")
            if time.monotonic() > deadline:
                raise ExecutorError(f"hvd.Executor: rank(s) {_ranks(missing)} did not connect back within "
                                    f"start_timeout_s={self.settings.start_timeout_s:g} s; {_RESTART}")
            readable, _, _ = select.select([self.listener, joined], [], [], 0.25)
            if joined in readable:
                joined.recv(4096)
            if self.listener not in readable:
                continue
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            sock.setblocking(True)
            threading.Thread(target=self._handshake, args=(sock, address, deadline), daemon=True,
                             name="hvd-executor-hello").start()

    def _handshake(self, sock: socket.socket, address, deadline: float) -> None:
        host = address[0][7:] if address[0].startswith("::ffff:") else address[0]
        peer = f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
        try:
            sock.settimeout(max(0.1, min(_HELLO_TIMEOUT_S, deadline - time.monotonic())))
            identity = protocol.read_hello(sock, self.token)
            rank, size = identity["rank"], identity["size"]
            if size != self.num_workers or rank >= self.num_workers:
                raise protocol.ProtocolError(f"rank {rank} of size {size} is not a rank of this executor's "
                                             f"{self.num_workers}")
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                if rank in self.conns:
                    raise protocol.ProtocolError(f"rank {rank} is already connected")
                if self._closing:
                    raise protocol.ProtocolError("the executor is shutting down")
                self.conns[rank] = _Conn(sock, identity)
                if self._joined.fileno() >= 0:  # connect() still waits: wake it
                    self._joined.send(b"j")
        except (OSError, protocol.ProtocolError) as e:
            sys.stderr.write(f"hvd.Executor: refused a connection from {peer}: {e}\n")
            sys.stderr.flush()
            sock.close()

    # ---- calls -------------------------------------------------------------------------------------------
    def submit(self, kind: str, payload: bytes, ranks: list, what: str, wants_sends: bool = True) -> _Call:
        """Sends ("call", id, kind, payload) to ranks (after the driver's sys.path when it changed). wants_sends:
        keep rank 0's sent values for wait() (False: they are dropped)."""
        with self._send_lock:
            with self.lock:
                if self.dead is not None:
                    raise self.dead
                call = _Call(next(self._ids), kind, ranks, what, wants_sends)
                self.calls[call.id] = call
            path = tuple(sys.path)
            messages = [protocol.call(call.id, kind, payload)]
            if path != self._path_sent:
                messages.insert(0, protocol.path(path))
                self._path_sent = path
            for rank in ranks:
                for message in messages:
                    try:
                        self.conns[rank].send(message)
                    except (OSError, protocol.ProtocolError):
                        break  # the rank's reader sees the broken connection and fails the call
        return call

    def wait(self, call: _Call, callbacks) -> list:
        """The results of call in rank order. Runs callbacks (in this thread) with rank 0's sent values.
        Raises the first WorkerError (with the other failed ranks named), the session's ExecutorError, or the
        first exception of a callback (once the call is over)."""
        relay = CallbackRelay(callbacks, pickle.loads)
        while True:
            event = _get(call.events)
            if event is None:
                continue
            if event[0] == "done":
                break
            relay.deliver(event[1])
        results = []
        for rank in call.ranks:
            future = call.futures[rank]
            error = future.exception()
            if isinstance(error, ExecutorError):
                raise error
            results.append(None if error is not None else future.result())
        if call.failures:
            rank, first = call.failures[0]
            raise first.with_others([(r, e.type_name, e.message) for r, e in call.failures[1:]])
        if relay.error is not None:
            raise relay.error
        return results

    def _read(self, conn: _Conn) -> None:
        why = "closed its connection"
        try:
            while True:
                message = protocol.recv_frame(conn.sock)
                if message is None:
                    break
                if message[0] == "result" and len(message) == 4:
                    self._on_result(conn.rank, *message[1:])
                elif message[0] == "output" and len(message) == 3 and message[1] in ("stdout", "stderr"):
                    self._output(conn.rank, message[1], str(message[2]))
                elif message[0] == "send" and len(message) == 3:
                    if conn.rank == 0:
                        with self.lock:
                            call = self.calls.get(message[1])
                        if call is not None and call.wants_sends:
                            call.events.put(("send", message[2]))
                else:
                    raise protocol.ProtocolError(f"unexpected {message[0]!r} message")
        except (OSError, protocol.ProtocolError) as e:
            why = f"broke its connection ({e})"
        self._on_lost(conn, why)

    def _output(self, rank: int, stream: str, text: str) -> None:
        """A thread-hosted rank's printed lines, tagged as hvdrun tags a rank's output, into the engine's output
        file when it has one, else this process's stream of the same name."""
        tagged = "".join(f"[{rank}]<{stream}>:{line}\n" for line in text.splitlines())
        target = getattr(self.engine, "output_file", None) or (sys.stdout if stream == "stdout" else sys.stderr)
        target.write(tagged)
        target.flush()

    def _on_result(self, rank: int, call_id: int, ok: bool, value) -> None:
        result = error = None
        if ok:
            try:
                result = pickle.loads(value)
            except Exception as e:
                error = WorkerError(rank, type(e).__qualname__, f"the return value of rank {rank} cannot be "
                                    f"unpickled in the driver: {e}", traceback.format_exc(), e)
        else:
            error = WorkerError.from_record(rank, value)
        with self.lock:
            call = self.calls.get(call_id)
            if call is None or rank not in call.pending:
                return
            call.pending.discard(rank)
            if error is not None:
                call.failures.append((rank, error))
                if call.first_failure_at is None:
                    call.first_failure_at = time.monotonic()
                    self._wake.set()
            finished = not call.pending
            if finished:
                del self.calls[call_id]
        _settle(call.futures[rank], result, error)
        if finished:
            call.events.put(("done",))

    def _on_lost(self, conn: _Conn, why: str) -> None:
        with self.lock:
            if self._closing or self.dead is not None or self._losing:
                return
            self._losing = True
        deadline = time.monotonic() + _LOSS_EXPLAIN_S
        status = self.engine.exit_status()
        while status is None and time.monotonic() < deadline:
            time.sleep(0.05)
            status = self.engine.exit_status()
        if status is None:
            text = f"{conn.describe()} {why}: the workers' engine is still running"
        else:
            # The engine's account first: it names the rank that failed (hvdrun's banner), while the connection
            # the driver saw close first may be that of a rank the engine stopped a moment later.
            text = f"{status} (the driver first saw {conn.describe()} {why})"
        self._die(ExecutorError(f"hvd.Executor: {text}; the executor is shut down: {_RESTART}"))

    def _watch(self) -> None:
        """Monitor thread: the engine's end and the deadline of calls on which a rank failed."""
        grace = getattr(self.settings, "failure_grace_s", None)
        timeout = self.settings.timeout_s if grace is None else grace
        setting = "settings.timeout_s" if grace is None else "settings.failure_grace_s"
        while True:
            self._wake.wait(_MONITOR_PERIOD_S)
            self._wake.clear()
            with self.lock:
                if self._closing or self.dead is not None:
                    return
                losing = self._losing
                late = [call for call in self.calls.values()
                        if call.first_failure_at is not None and call.pending
                        and time.monotonic() - call.first_failure_at > _grace(call, timeout)]
            if late:
                call = late[0]
                rank, first = call.failures[0]
                error = ExecutorError(
                    f"hvd.Executor: rank {rank} raised {first.type_name}: {first.message}, and rank(s) "
                    f"{_ranks(sorted(call.pending))} were still running {call.what} {timeout:g} s later "
                    f"({setting}; blocked in a collective that rank {rank} never joined?); the executor "
                    f"is shut down: {_RESTART}")
                error.__cause__ = first
                self._die(error)
                return
            if not losing:
                status = self.engine.exit_status()
                if status is not None:
                    self._die(ExecutorError(f"hvd.Executor: the workers ended: {status}; {_RESTART}"))
                    return

    def _die(self, error: ExecutorError) -> None:
        with self.lock:
            if self.dead is not None or self._closing:
                return
            self.dead = error
            calls = list(self.calls.values())
            self.calls.clear()
        for call in calls:
            for rank in list(call.pending):
                _settle(call.futures[rank], error=error)
            call.events.put(("done",))
        threading.Thread(target=self.close, daemon=True, name="hvd-executor-teardown").start()

    # ---- end ---------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stops the workers and the engine; idempotent; a second caller waits for the first to finish."""
        with self._close_lock:
            if self._closed:
                return
            with self.lock:
                self._closing = True
                calls = list(self.calls.values())
                self.calls.clear()
                conns = list(self.conns.values())
            error = self.dead or ExecutorError(f"hvd.Executor: the executor was shut down; {_RESTART}")
            for call in calls:
                for rank in list(call.pending):
                    _settle(call.futures[rank], error=error)
                call.events.put(("done",))
            for conn in conns:
                try:
                    conn.sock.settimeout(2.0)
                    conn.send(protocol.stop())
                except (OSError, protocol.ProtocolError):
                    pass
                conn.close()
            try:
                self.listener.close()
            except OSError:
                pass
            self._wake.set()
            if self._started:
                self.engine.stop(_STOP_GRACE_S)
            current = threading.current_thread()
            for thread in [conn.reader for conn in conns] + [self._monitor]:
                if thread is not None and thread is not current:
                    thread.join(5.0)
            self._closed = True
            with _live_lock:
                _live.discard(self)


def _get(events: queue.SimpleQueue):
    """The next event, waiting at most 1 s (so KeyboardInterrupt is seen promptly); None when none came."""
    try:
        return events.get(timeout=1.0)
    except queue.Empty:
        return None


def _ranks(ranks) -> str:
    return ", ".join(str(r) for r in ranks)
