"""horovod.runner.util.threads on hvd: Horovod's small thread helpers, with its signatures and behaviour.

    in_thread(target, args=(), name=None, daemon=True, silent=False) -> Thread   started at once
    on_event(event, func, args=(), stop=None, check_stop_interval_s=1.0, daemon=True, silent=False) -> Thread
    execute_function_multithreaded(fn, args_list, block_until_all_done=True, max_concurrent_executions=1000)
        -> {index: fn(*args_list[index])} (None when not blocking)

args must be a tuple (ValueError otherwise, as in Horovod). silent=True swallows the target's exceptions.
execute_function_multithreaded appends each item's index to its argument list (Horovod does too) and raises
RuntimeError naming fn when some call did not complete.
"""

import queue
import threading


def _check_args(args):
    if not isinstance(args, tuple):
        raise ValueError(f"args must be a tuple, not {type(args)}, for a single argument use (arg,)")


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Runs target(*args) in a new thread, started before returning it."""
    _check_args(args)
    body = target
    if silent:
        def body(*a):
            try:
                target(*a)
            except BaseException:
                pass
    thread = threading.Thread(target=body, args=args, name=name, daemon=daemon)
    thread.start()
    return thread


def on_event(event, func, args=(), stop=None, check_stop_interval_s=1.0, daemon=True, silent=False):
    """Runs func(*args) in a new thread once event is set; with stop, not if stop is set first (checked every
    check_stop_interval_s). A non-daemon thread needs a stop event (ValueError otherwise)."""
    if event is None:
        raise ValueError("Event must not be None")
    _check_args(args)
    if stop is None and not daemon:
        raise ValueError("Stop event must be given for non-daemon event thread")

    def wait_then_call():
        if stop is None:
            event.wait()
        else:
            while not event.is_set() and not stop.is_set():
                event.wait(timeout=check_stop_interval_s)
            if stop.is_set():
                return
        func(*args)

    return in_thread(wait_then_call, daemon=daemon, silent=silent)


def execute_function_multithreaded(fn, args_list, block_until_all_done=True, max_concurrent_executions=1000):
    """fn(*args) for every args in args_list on up to max_concurrent_executions threads."""
    work = queue.Queue()
    results = queue.Queue()
    for index, args in enumerate(args_list):
        args.append(index)
        work.put(args)

    def drain():
        while True:
            try:
                args = work.get(block=False)
            except queue.Empty:
                return
            results.put((args[-1], fn(*args[:-1])))

    threads = [in_thread(drain, daemon=not block_until_all_done)
               for _ in range(min(max_concurrent_executions, len(args_list)))]
    if not block_until_all_done:
        return None
    # Short joins, so that a signal (Ctrl-C) still reaches this thread.
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.1)
    done = {}
    while not results.empty():
        index, value = results.get()
        done[index] = value
    if len(done) != len(args_list):
        raise RuntimeError(f"Some threads for func {fn.__name__} did not complete successfully.")
    return done
