"""CUDA tensors through pinned host memory: how every hvd.torch collective takes a tensor on a GPU.

libhvd's data paths (Gloo and shared memory) read and write host memory, and the package links no CUDA
(it must import and run where torch has no CUDA at all). A CUDA tensor's operation therefore runs on a
host copy, as Horovod's Gloo build runs it:

1. to_host(): hvd's own CUDA stream for the tensor's device waits for the caller's current stream (an
   event recorded there, not a device-wide synchronize), copies the tensors into pinned host buffers,
   and the calling thread waits for those copies alone; libhvd then runs the operation on the buffers.
2. to_device(): once the operation finished, hvd's stream (again after the caller's current stream,
   whose queued work may still read or write the destination) copies the host results onto the device,
   and the caller's current stream waits for that copy by an event. The call returns without waiting
   for the GPU: what the caller queues next on its stream runs after the copy, and a host-side read
   (.cpu(), .item()) waits for it as for any other kernel.

Pinned buffers come from PyTorch's caching host allocator, so a training loop reuses the same buffers
step after step; a buffer freed while an asynchronous copy still reads it is not handed out again until
that copy is done (the allocator records an event on the copying stream).

The result is ordered with the caller's current stream at synchronize() (the stream that is current then);
work on another stream must wait for that one, as for any CUDA result. Cost: each staged call waits (the
calling thread sleeps) until the caller's stream has run what it had queued and the copy to the host is
done, so DistributedOptimizer's gradient hooks hold the autograd thread until the GPU catches up with it.

Nothing here runs unless a tensor is on a CUDA device, so on CPU-only torch this module is inert.
"""

import threading
from typing import Dict, List, Optional, Sequence

import torch

_streams: Dict[int, "torch.cuda.Stream"] = {}
_streams_lock = threading.Lock()


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _stream(index: int) -> "torch.cuda.Stream":
    """hvd's copy stream on device index (one per device, created on first use, shared by threads)."""
    stream = _streams.get(index)
    if stream is None:
        with _streams_lock:
            stream = _streams.get(index)
            if stream is None:
                stream = _streams[index] = torch.cuda.Stream(device=index)
    return stream


def device_id(tensor: torch.Tensor) -> int:
    """What libhvd compares across ranks for tensor: its CUDA ordinal, or -1 on the CPU."""
    return _index(tensor.device) if tensor.is_cuda else -1


def to_host(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Contiguous pinned host copies of tensors (all on one CUDA device), complete when this returns."""
    index = _index(tensors[0].device)
    stream = _stream(index)
    stream.wait_stream(torch.cuda.current_stream(index))
    hosts = []
    with torch.cuda.stream(stream):
        for t in tensors:
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            host.copy_(t, non_blocking=True)
            hosts.append(host)
        done = torch.cuda.Event(blocking=True)  # the wait below sleeps rather than spins
        done.record(stream)
    done.synchronize()  # these copies only; libhvd's thread reads the buffers next
    return hosts


def to_device(hosts: Sequence[torch.Tensor], device: torch.device,
              into: Optional[Sequence[torch.Tensor]] = None) -> List[torch.Tensor]:
    """hosts copied onto device (into the tensors of `into` when given, else into new tensors), ordered
    before whatever the caller's current stream runs next; returns the device tensors."""
    index = _index(device)
    stream = _stream(index)
    caller = torch.cuda.current_stream(index)
    outs = list(into) if into is not None else [torch.empty(h.shape, dtype=h.dtype, device=device) for h in hosts]
    stream.wait_stream(caller)
    with torch.cuda.stream(stream):
        for host, out in zip(hosts, outs):
            out.copy_(host, non_blocking=True)
            if into is not None:
                # The caller's tensor may belong to another stream (a side stream's, autograd's): if it is
                # freed before that stream reaches this copy, its memory must not be handed out again there.
                out.record_stream(stream)
    caller.wait_stream(stream)
    return outs
