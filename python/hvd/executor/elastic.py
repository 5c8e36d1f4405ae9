"""One run() of an elastic Executor: an elastic hvdrun job in which every worker process runs the function once.

Contract. run_elastic(engine, settings, fn, args, kwargs, env, callbacks) starts the engine's elastic hvdrun job
(--min-np/--max-np, hosts from -H, a hostfile or a discovery script) of `python -m hvd.executor.worker` processes
in one-shot mode. Every process that connects back -- the first ones, replacements of failed workers, the
processes of hosts that were added -- gets the call; fn is expected to train under hvd.elastic.run, so the
processes re-form the job among themselves when one fails or hosts come and go. A process reports fn's return
value with the rank and the rendezvous round it had when fn returned, then exits 0 (or 1 when fn raised, so that
hvdrun replaces it). When hvdrun has exited, run_elastic returns the values of the processes that returned in the
last round any process returned in, in rank order. It raises the first WorkerError when no process returned and
some raised, else ExecutorError with hvdrun's account of the job. Callbacks get the values that hvd's rank 0 of
the moment passes to hvd.executor.send, in order, in the calling thread.

Deadlines: the job's own (--elastic-timeout: hvdrun ends a job that stays below --min-np that long). Ctrl-C
stops the job (hvdrun gets SIGTERM and stops its workers) and re-raises KeyboardInterrupt; the executor's
shutdown() from another thread stops it too, and the run raises ExecutorError. Stateful workers (executable_cls,
execute) are not elastic: the executor refuses them before this module is involved.

Threading: an acceptor thread (it wakes every 0.5 s to see whether the job is over) and one reader thread per
worker connection feed one queue, read by the calling thread.
"""

import os
import queue
import secrets
import socket
import sys
import threading
import time

from hvd.executor import protocol
from hvd.executor.callbacks import CallbackRelay
from hvd.executor.errors import ExecutorError, WorkerError
from hvd.executor.session import _RESTART, _listen
from hvd.executor.worker import ONE_SHOT_ENV
from hvd.run_task import _pickler

_DRAIN_S = 2.0


def _with_final_rank(fn, args, kwargs):
    """Runs on a worker: fn's value with the rank and round the worker had when fn returned."""
    value = fn(*args, **kwargs)
    basics = sys.modules.get("hvd.common.basics")
    if basics is not None and basics.is_initialized():
        rank = basics.rank()
    else:
        rank = int(os.environ.get("HOROVOD_RANK", "0"))
    round_ = int(os.environ.get("HVD_ELASTIC_ROUND", "0"))
    elastic = sys.modules.get("hvd.common.elastic")
    if elastic is not None and elastic.elastic_round() >= 0:
        round_ = elastic.elastic_round()
    return rank, round_, value


class _Job:
    def __init__(self, engine, settings):
        self.engine = engine
        self.settings = settings
        self.token = secrets.token_hex(16)
        self.listener = _listen()
        self.port = self.listener.getsockname()[1]
        self.events = queue.SimpleQueue()
        self.payload = None
        self.socks = []
        self.readers = []
        self.lock = threading.Lock()
        self.closed = False

    def accept(self) -> None:
        self.listener.settimeout(0.5)
        while not self.closed:
            try:
                sock, address = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            reader = threading.Thread(target=self.serve, args=(sock, address), daemon=True,
                                      name="hvd-executor-elastic")
            with self.lock:
                if self.closed:
                    sock.close()
                    return
                self.socks.append(sock)
                self.readers.append(reader)
            reader.start()

    def serve(self, sock: socket.socket, address) -> None:
        try:
            sock.settimeout(10.0)
            identity = protocol.read_hello(sock, self.token)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            protocol.send_frame(sock, protocol.path(sys.path))
            protocol.send_frame(sock, protocol.call(1, "run", self.payload))
            while True:
                message = protocol.recv_frame(sock)
                if message is None:
                    return
                if message[0] == "send" and len(message) == 3:
                    self.events.put(("send", message[2]))
                elif message[0] == "result" and len(message) == 4:
                    self.events.put(("result", identity, message[2], message[3]))
        except (OSError, protocol.ProtocolError) as e:
            if not self.closed and isinstance(e, protocol.ProtocolError):
                sys.stderr.write(f"hvd.Executor: refused a connection from {address[0]}:{address[1]}: {e}\n")
        finally:
            sock.close()

    def readers_done(self) -> bool:
        with self.lock:
            return all(not r.is_alive() for r in self.readers)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            socks = list(self.socks)
        try:
            self.listener.close()
        except OSError:
            pass
        # A job still running is stopped at once: its workers would only be replaced while nobody listens.
        self.engine.stop(0 if self.engine.exit_status() is None else 10)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for reader in list(self.readers):
            reader.join(5.0)


def run_elastic(engine, settings, fn, args: tuple, kwargs: dict, env: dict, callbacks: list, dump,
                stop: "threading.Event | None" = None) -> list:
    """See the module docstring. dump(obj) pickles the call (ValueError naming fn when it cannot). Once stop is set
    (the executor is shut down), the job is stopped and ExecutorError raised."""
    job = _Job(engine, settings)
    job.payload = dump((_with_final_rank, (fn, args, kwargs), {}))
    successes, failures = [], []
    relay = CallbackRelay(callbacks, _pickler.loads)
    acceptor = None

    def stopped() -> None:
        if stop is not None and stop.is_set():
            raise ExecutorError(f"hvd.Executor: the executor was shut down while run() ran; {_RESTART}")

    try:
        stopped()
        engine.start(num_workers=engine.num_workers, driver_port=job.port, token=job.token,
                     env=dict(env, **{ONE_SHOT_ENV: "1"}), settings=settings)
        acceptor = threading.Thread(target=job.accept, daemon=True, name="hvd-executor-accept")
        acceptor.start()
        ended_at = None
        while True:
            stopped()
            try:
                event = job.events.get(timeout=0.2)
            except queue.Empty:
                event = None
            if event is not None and event[0] == "send":
                relay.deliver(event[1])
            elif event is not None:
                _, identity, ok, value = event
                if ok:
                    try:
                        successes.append(_pickler.loads(value))
                    except Exception as e:
                        failures.append(WorkerError(identity["rank"], type(e).__qualname__,
                                                    f"a return value cannot be unpickled in the driver: {e}", ""))
                else:
                    failures.append(WorkerError.from_record(identity["rank"], value))
            if event is None and engine.exit_status() is not None:
                ended_at = ended_at or time.monotonic()
                if job.readers_done() or time.monotonic() - ended_at > _DRAIN_S:
                    if job.events.empty():
                        break
    finally:
        job.close()
        if acceptor is not None:
            acceptor.join(2.0)
    stopped()  # the job ended because the executor was shut down: whatever came back is not the run's result
    status = engine.exit_status()
    if successes:
        if relay.error is not None:
            raise relay.error
        last = max(round_ for _, round_, _ in successes)
        final = sorted(((rank, value) for rank, round_, value in successes if round_ == last),
                       key=lambda item: item[0])
        return [value for _, value in final]
    if failures:
        first = failures[0]
        raise first.with_others([(e.rank, e.type_name, e.message) for e in failures[1:]])
    raise ExecutorError(f"hvd.Executor: the elastic job ended without a result: {status}; call run() again")
