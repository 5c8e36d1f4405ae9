"""CallbackRelay: runs the driver's callbacks with each value rank 0 sends (hvd.executor.send).

Contract. deliver(payload) unpickles payload with loads and calls every callback with the value, in the
calling thread, in order. The first exception (unpickling or a callback's) stops all later deliveries and
is kept in .error; the caller raises it once the call is over, after any worker's error.
"""

from typing import Callable, Optional, Sequence


class CallbackRelay:
    def __init__(self, callbacks: Optional[Sequence[Callable]], loads: Callable[[bytes], object]):
        self._callbacks = list(callbacks or [])
        self._loads = loads
        self.error: Optional[BaseException] = None

    def deliver(self, payload: bytes) -> None:
        if self.error is not None or not self._callbacks:
            return
        try:
            value = self._loads(payload)
            for callback in self._callbacks:
                callback(value)
        except Exception as e:  # kept for the caller: a callback's failure must not end the call early
            self.error = e
