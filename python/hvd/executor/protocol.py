"""The wire protocol between an Executor's driver and its workers: framing, the hello, the message tuples.

Contract. One TCP connection per rank, opened by the worker to the driver. Every frame is an 8-byte big-endian
length followed by that many bytes of pickle.dumps(message), message a tuple whose first item names it:

    driver -> worker   ("path", entries)                        the driver's sys.path, sent before the first call
                                                                 and again when it changed; the worker appends the
                                                                 entries it lacks, so functions pickled by reference
                                                                 (a test module, the driver's own modules) import
                       ("call", call_id, kind, payload)         kind: "setup" (payload: the class, its args and
                                                                 kwargs), "run" (fn, args, kwargs) or "execute" (fn,
                                                                 called with the setup instance); payload is
                                                                 cloudpickle bytes, unpickled by the worker only when
                                                                 it runs the call, so an import error there is that
                                                                 call's failure
                       ("stop",)                                 leave: the worker shuts hvd down and returns
    worker -> driver   ("hello", token, identity)               first frame; identity: rank, size, local_rank,
                                                                 local_size, host, pid
                       ("result", call_id, ok, value)           ok: value is the cloudpickled return value; else the
                                                                 failure record of hvd.run_task._failure (type,
                                                                 message, traceback, time, pickled exception)
                       ("send", call_id, payload)               a value the running call passed to
                                                                 hvd.executor.send (cloudpickle bytes)
                       ("output", stream, text)                 whole lines ("stdout" or "stderr") a rank that
                                                                 runs as a thread of a host process printed
                                                                 (hvd.executor.thread_output)

Errors. A frame longer than MAX_FRAME_BYTES, a truncated frame or one that does not unpickle to a tuple raises
ProtocolError; a clean end of stream between frames returns None. The hello arrives before the peer is
authenticated, so it is read with read_hello: a size limit of HELLO_MAX_BYTES and an unpickler that refuses every
global (only tuples, dicts, strings and numbers load), so an unauthenticated peer cannot make the driver run code.

Threading. send_frame writes a frame with one sendall (two for large payloads); callers that share a socket
between threads hold their own lock around it. recv_frame blocks without a timeout unless the socket has one.
"""

import hmac
import io
import pickle
import socket
import struct

# Environment variables through which hvdrun's workers learn where the driver listens.
PORT_ENV = "HVD_EXECUTOR_PORT"
TOKEN_ENV = "HVD_EXECUTOR_TOKEN"

MAX_FRAME_BYTES = 4 << 30
# The largest payload (pickled function, return value, sent value) a message may carry: room for the tuple.
MAX_PAYLOAD_BYTES = MAX_FRAME_BYTES - (64 << 10)
HELLO_MAX_BYTES = 64 << 10
_HEADER = struct.Struct(">Q")
# Below this size the header and the body go out in one write (no small-packet delay on either side).
_COALESCE_BYTES = 256 << 10


class ProtocolError(RuntimeError):
    """A peer sent something that is not a frame of this protocol."""


def send_frame(sock: socket.socket, message: tuple) -> None:
    """Pickles message and writes it as one frame. Raises OSError when the connection is gone, ProtocolError
    when the pickled message exceeds MAX_FRAME_BYTES."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"a {message[0]!r} message of {len(body)} bytes exceeds the frame limit of "
                            f"{MAX_FRAME_BYTES} bytes")
    header = _HEADER.pack(len(body))
    if len(body) <= _COALESCE_BYTES:
        sock.sendall(header + body)
    else:
        sock.sendall(header)
        sock.sendall(body)


def _recv_exact(sock: socket.socket, count: int, *, at_frame_start: bool):
    """count bytes, or None on a clean end of stream before the first byte of a frame."""
    buffer = bytearray(count)
    view = memoryview(buffer)
    got = 0
    while got < count:
        n = sock.recv_into(view[got:], count - got)
        if n == 0:
            if got == 0 and at_frame_start:
                return None
            raise ProtocolError(f"connection closed in the middle of a frame ({got} of {count} bytes)")
        got += n
    return buffer


def _read_body(sock: socket.socket, limit: int):
    header = _recv_exact(sock, _HEADER.size, at_frame_start=True)
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    if length > limit:
        raise ProtocolError(f"frame of {length} bytes exceeds the limit of {limit} bytes")
    return _recv_exact(sock, length, at_frame_start=False)


def _check_message(message) -> tuple:
    if not isinstance(message, tuple) or not message or not isinstance(message[0], str):
        raise ProtocolError(f"a frame holds {type(message).__name__}, not a message tuple")
    return message


def recv_frame(sock: socket.socket):
    """The next message tuple, or None when the peer closed the connection between frames. Only for an
    authenticated peer (the frame is unpickled with pickle)."""
    body = _read_body(sock, MAX_FRAME_BYTES)
    if body is None:
        return None
    try:
        message = pickle.loads(body)
    except Exception as e:
        raise ProtocolError(f"a frame does not unpickle: {type(e).__name__}: {e}") from e
    return _check_message(message)


class _PlainUnpickler(pickle.Unpickler):
    """Loads only built-in containers and scalars: any class or function reference is refused."""

    def find_class(self, module, name):
        raise ProtocolError(f"the hello may not reference {module}.{name}")


def read_hello(sock: socket.socket, token: str) -> dict:
    """Reads and checks a worker's hello; returns its identity dict (rank, size, local_rank, local_size, host,
    pid). Raises ProtocolError naming what is wrong (no hello, a wrong token, a malformed identity)."""
    body = _read_body(sock, HELLO_MAX_BYTES)
    if body is None:
        raise ProtocolError("the connection closed before a hello")
    try:
        message = _PlainUnpickler(io.BytesIO(bytes(body))).load()
    except ProtocolError:
        raise
    except Exception as e:
        raise ProtocolError(f"the hello does not unpickle: {type(e).__name__}: {e}") from e
    _check_message(message)
    if message[0] != "hello" or len(message) != 3:
        raise ProtocolError(f"expected a hello, got a {message[0]!r} message")
    _, offered, identity = message
    if not isinstance(offered, str) or not hmac.compare_digest(offered.encode(), token.encode()):
        raise ProtocolError("wrong token")
    if not isinstance(identity, dict):
        raise ProtocolError(f"the hello's identity is a {type(identity).__name__}, not a dict")
    for key in ("rank", "size", "local_rank", "local_size", "pid"):
        value = identity.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ProtocolError(f"the hello's {key} is {value!r}, not a non-negative int")
    if not isinstance(identity.get("host"), str):
        raise ProtocolError(f"the hello's host is {identity.get('host')!r}, not a string")
    return identity


def hello(token: str, identity: dict) -> tuple:
    return ("hello", token, identity)


def call(call_id: int, kind: str, payload: bytes) -> tuple:
    return ("call", call_id, kind, payload)


def path(entries: list) -> tuple:
    return ("path", list(entries))


def stop() -> tuple:
    return ("stop",)


def result(call_id: int, ok: bool, value) -> tuple:
    return ("result", call_id, ok, value)


def sent(call_id: int, payload: bytes) -> tuple:
    return ("send", call_id, payload)


def output(stream: str, text: str) -> tuple:
    return ("output", stream, text)
