"""One rank of an hvd.Executor: connects back to the driver and runs its calls until told to stop.

Started by hvdrun as `python -m hvd.executor.worker` (HvdrunEngine), with HOROVOD_GLOO_RENDEZVOUS_ADDR (an address
of the hvdrun host, where the driver runs), HVD_EXECUTOR_PORT and HVD_EXECUTOR_TOKEN in the environment; another
engine calls serve(host, port, token) itself after setting the HOROVOD_* variables of the rank in os.environ.

serve() says hello (token, rank, size, local rank and size, host, pid), then runs each call the driver sends in the
thread that called serve() -- hvd's collectives need one thread issuing them in the same order on every rank --
and sends back its result: the cloudpickled return value, or the failure record of hvd.run_task (type, message,
traceback starting in the user's function, pickled exception). A failing call does not end the worker. While a
call runs, hvd.executor.send(value) sends value to the driver, whose callbacks see rank 0's values.

Elastic runs (HVD_EXECUTOR_ONE_SHOT=1, one_shot=True): the worker runs one call and exits with 0 when it succeeded,
1 when it failed, so that hvdrun's elastic driver replaces a failed worker; its rank is hvd's rank at the time.

Ending. ("stop",) or the end of the connection (the driver shut down, died or was SIGKILLed) ends the loop: hvd
is shut down if the calls initialized it, and serve() returns 0 (130 after SIGINT). A thread of its own reads the
connection, so nothing polls: the caller's thread waits on a queue, the reader on the socket. A ("stop",) that
comes while a call is running (Executor.shutdown, a pruned trial) ends the process at once with os._exit(0): the
driver asked for the end, as Ray ends an actor's running task, and the other ranks are told the same
(exit_on_driver_loss=True: the hvdrun worker, and a rank hosted in a Dask worker process). When the connection ends without one while a call is still
running, the reader waits GRACE_S for the call to return and then ends the process with os._exit(1) (a function
blocked in a collective or a loop must not outlive the driver). With exit_on_driver_loss=False (a process that
hosts more than this rank) the call is left to finish either way and serve() returns after it. hvdrun's own
SIGTERM (it dies with the driver) ends the process at once.
"""

import os
import queue
import socket
import sys
import threading

from hvd.executor import protocol, thread_output
from hvd.run_task import _failure, _pickler

GRACE_S = 1.0
CONNECT_TIMEOUT_S = 30.0
# hvd shutdown after the driver left: longer than this means a peer is stuck, and the process ends.
SHUTDOWN_TIMEOUT_S = 15.0

# Set by the driver of an elastic run: each worker process runs one call and exits with its outcome.
ONE_SHOT_ENV = "HVD_EXECUTOR_ONE_SHOT"

# (link, call_id, rank) while a call runs in serve(); read by send() from any thread.
_current = None


class _Link:
    """The worker's end of the connection; writes are serialized (send() may run on any thread)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.lock = threading.Lock()

    def send(self, message: tuple) -> None:
        with self.lock:
            protocol.send_frame(self.sock, message)


def send(value) -> None:
    """Sends value to the driver while an Executor call runs on this worker: the driver calls every callback of
    that call with it, in order, for the values of rank 0 (the other ranks' values are dropped).

    Raises RuntimeError outside a call of an executor worker, ValueError when value cannot be pickled, OSError
    when the driver is gone."""
    current = _current
    if current is None:
        raise RuntimeError("hvd.executor.send: called outside an executor call (it passes a value from a function "
                           "that Executor.run or Executor.execute is running to the driver's callbacks)")
    link, call_id, rank = current
    try:
        payload = _pickler.dumps(value)
    except Exception as e:
        raise ValueError(f"hvd.executor.send: the value ({type(value).__name__}) cannot be pickled: "
                         f"{type(e).__name__}: {e}") from e
    if len(payload) > protocol.MAX_PAYLOAD_BYTES:
        raise ValueError(f"hvd.executor.send: the value ({type(value).__name__}) pickles to {len(payload)} bytes, "
                         f"more than a message carries ({protocol.MAX_PAYLOAD_BYTES})")
    if _rank_now(rank) == 0:
        link.send(protocol.sent(call_id, payload))


def _rank_now(rank_at_start: int) -> int:
    """hvd's rank when the calls initialized hvd (it changes when an elastic job re-forms), else the rank the
    worker started with."""
    basics = sys.modules.get("hvd.common.basics")
    if basics is not None and basics.is_initialized():
        return basics.rank()
    return rank_at_start


def _identity() -> dict:
    values = {}
    for key, name in (("rank", "HOROVOD_RANK"), ("size", "HOROVOD_SIZE"), ("local_rank", "HOROVOD_LOCAL_RANK"),
                      ("local_size", "HOROVOD_LOCAL_SIZE")):
        text = os.environ.get(name)
        if text is None and key.startswith("local_"):
            text = "0" if key == "local_rank" else "1"
        try:
            values[key] = int(text)
        except (TypeError, ValueError):
            raise ValueError(f"hvd.executor.worker: {name}={text!r} is not an int (the engine sets the rank's "
                             "HOROVOD_* variables before serve())") from None
    values["host"] = os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()
    values["pid"] = os.getpid()
    return values


def _execute(kind: str, payload: bytes, instance, rank: int):
    """Runs one call; returns (ok, pickled value or failure record, instance)."""
    try:
        obj = _pickler.loads(payload)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        record = _failure(e, e.__traceback__)
        record["message"] = f"cannot unpickle the function on rank {rank}: {record['message']}"
        return False, record, instance
    try:
        if kind == "setup":
            cls, args, kwargs = obj
            instance = None if cls is None else cls(*args, **kwargs)
            value = None
        elif kind == "run":
            fn, args, kwargs = obj
            value = fn(*args, **kwargs)
        elif kind == "execute":
            value = obj(instance)
        else:
            raise protocol.ProtocolError(f"unknown call kind {kind!r}")
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        # Leave out this module's frame: the traceback starts in the user's code.
        return False, _failure(e, e.__traceback__.tb_next or e.__traceback__), instance
    try:
        pickled = _pickler.dumps(value)
        if len(pickled) > protocol.MAX_PAYLOAD_BYTES:
            raise ValueError(f"it pickles to {len(pickled)} bytes, more than a message carries "
                             f"({protocol.MAX_PAYLOAD_BYTES})")
        return True, pickled, instance
    except Exception as e:
        record = _failure(e, e.__traceback__)
        record["message"] = f"the return value of rank {rank} cannot be pickled: {record['message']}"
        return False, record, instance


def _read(sock: socket.socket, inbox: queue.SimpleQueue, idle: threading.Event, gone: threading.Event,
          stopping: threading.Event, exit_on_driver_loss: bool, rank: int) -> None:
    """Reader thread: frames into inbox, then None at the end of the connection, and sets gone; sets stopping at
    ("stop",). With exit_on_driver_loss, ends the process at once when ("stop",) comes while a call runs, and
    GRACE_S after the connection ended while a call keeps running. The main loop clears idle before it looks at
    gone and stopping, and this thread sets them before it looks at idle: a call either never starts, or this
    thread sees it running."""
    why = "the driver closed the connection"
    try:
        while True:
            message = protocol.recv_frame(sock)
            if message is None:
                break
            if message[0] == "stop":
                stopping.set()
                if exit_on_driver_loss and not idle.is_set():
                    _end_now()
            inbox.put(message)
    except (OSError, protocol.ProtocolError) as e:
        why = f"the connection to the driver failed: {e}"
    inbox.put(None)
    gone.set()
    if exit_on_driver_loss and not idle.wait(GRACE_S):
        _die(f"hvd.executor.worker: rank {rank}: {why} while a call was running; exiting")


def _end_now() -> None:
    """The driver stopped the job while a call runs: what the call printed goes out, then the process ends. A
    flush that cannot finish (the call's thread holds the stream, blocked on a full pipe) is given a second."""
    timer = threading.Timer(GRACE_S, os._exit, args=(0,))
    timer.daemon = True
    timer.start()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or broken stream: nothing more to save
            pass
    os._exit(0)


def _die(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    finally:
        os._exit(1)


def _leave_hvd(exit_on_driver_loss: bool, rank: int) -> None:
    """Shuts hvd down when this process's calls initialized it (hvd is only looked at if already imported)."""
    basics = sys.modules.get("hvd.common.basics")
    if basics is None:
        return
    watchdog = None
    if exit_on_driver_loss:
        watchdog = threading.Timer(SHUTDOWN_TIMEOUT_S, _die, args=(
            f"hvd.executor.worker: rank {rank}: hvd shutdown did not finish within {SHUTDOWN_TIMEOUT_S:g} s; "
            "exiting",))
        watchdog.daemon = True
        watchdog.start()
    try:
        if basics.is_initialized():
            basics.shutdown()
    except Exception as e:
        sys.stderr.write(f"hvd.executor.worker: rank {rank}: hvd shutdown failed: {type(e).__name__}: {e}\n")
    finally:
        if watchdog is not None:
            watchdog.cancel()


def serve(host: str, port: int, token: str, *, exit_on_driver_loss: bool = True, one_shot: bool = False,
          forward_output: bool = False) -> int:
    """Connects to the driver at host:port, says hello with token and the rank's identity (from the HOROVOD_*
    variables in os.environ), and runs the driver's calls in the calling thread until ("stop",) or the end of the
    connection. Returns 0 then, 1 when the driver cannot be reached, 130 after KeyboardInterrupt.

    exit_on_driver_loss: when ("stop",) comes while a call runs, end the process at once with os._exit(0), and when
    the connection ends while a call runs, with os._exit(1) after GRACE_S (True); or let the call finish and
    return (False). one_shot: return after the first call, 0 when it succeeded and 1 when it failed (a worker of an
    elastic job, whose exit status hvdrun acts on). forward_output: what the calling thread prints goes to the
    driver as ("output", ...) messages (a rank hosted as a thread; hvd.executor.thread_output). Raises
    ValueError when a HOROVOD_* variable of the rank is missing or not an int."""
    global _current
    identity = _identity()
    rank = identity["rank"]
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except OSError as e:
        sys.stderr.write(f"hvd.executor.worker: rank {rank} cannot connect to the driver at {host}:{port}: {e}\n")
        return 1
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    link = _Link(sock)
    inbox = queue.SimpleQueue()
    idle = threading.Event()
    idle.set()
    gone = threading.Event()  # the driver's connection ended: calls still queued have nobody to answer to
    stopping = threading.Event()  # ("stop",) came: calls queued behind it are not run
    code = 0
    instance = None
    try:
        link.send(protocol.hello(token, identity))
        if forward_output:
            thread_output.capture(lambda stream, text: link.send(protocol.output(stream, text)))
        reader = threading.Thread(target=_read, args=(sock, inbox, idle, gone, stopping, exit_on_driver_loss, rank),
                                  name="hvd-executor-reader", daemon=True)
        reader.start()
        while True:
            message = inbox.get()
            if message is None or message[0] == "stop":
                break
            if message[0] == "path":
                for entry in message[1]:
                    if entry not in sys.path:
                        sys.path.append(entry)
                continue
            if message[0] != "call" or len(message) != 4:
                sys.stderr.write(f"hvd.executor.worker: rank {rank}: ignoring an unknown {message[0]!r} message\n")
                continue
            _, call_id, kind, payload = message
            idle.clear()
            if gone.is_set() or stopping.is_set():
                idle.set()
                break
            _current = (link, call_id, rank)
            try:
                ok, value, instance = _execute(kind, payload, instance, rank)
            finally:
                _current = None
                idle.set()
            link.send(protocol.result(call_id, ok, value))
            if one_shot:
                code = 0 if ok else 1
                break
    except KeyboardInterrupt:
        code = 130
    except (OSError, protocol.ProtocolError):
        pass  # the driver is gone: leave as after ("stop",)
    finally:
        instance = None
        if forward_output:
            thread_output.release()
        _leave_hvd(exit_on_driver_loss, rank)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
    return code


def main() -> int:
    """`python -m hvd.executor.worker`, started by hvdrun for HvdrunEngine."""
    needed = ("HOROVOD_GLOO_RENDEZVOUS_ADDR", protocol.PORT_ENV, protocol.TOKEN_ENV, "HOROVOD_RANK", "HOROVOD_SIZE")
    missing = [name for name in needed if not os.environ.get(name)]
    if missing:
        sys.stderr.write(f"hvd.executor.worker: {', '.join(missing)} not set: this module is a worker of "
                         "hvd.Executor, started by hvdrun for it\n")
        return 2
    try:
        port = int(os.environ[protocol.PORT_ENV])
    except ValueError:
        sys.stderr.write(f"hvd.executor.worker: {protocol.PORT_ENV}={os.environ[protocol.PORT_ENV]!r} is not a "
                         "port number\n")
        return 2
    # The token stays out of the environment of what the user's functions start.
    token = os.environ.pop(protocol.TOKEN_ENV)
    return serve(os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"], port, token,
                 one_shot=os.environ.get(ONE_SHOT_ENV) == "1")


if __name__ == "__main__":
    # Run the imported module, not this __main__ copy: hvd.executor.send reads the state of hvd.executor.worker.
    from hvd.executor import worker as _worker

    _code = _worker.main()
    # The rank is done: hvd is shut down and the driver has its results. The atexit functions run (logging's
    # flush, the user's own), then the process ends without the interpreter's teardown of every module, which
    # with torch loaded takes about 0.3 s and was most of an Executor's shutdown.
    import atexit

    atexit._run_exitfuncs()
    for _stream in (sys.stdout, sys.stderr):
        try:
            _stream.flush()
        except Exception:
            pass
    os._exit(_code)
