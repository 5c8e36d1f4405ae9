"""Horovod's `horovod` package on hvd: lets unmodified Horovod scripts (`import horovod.torch as hvd`,
`horovod.run(...)`) run on libhvd.

This package is hvd's compatibility layer, importable only when hvd/compat is on sys.path (hvdrun puts it
there on request; hvd.run does when the caller uses it or HVD_HOROVOD_COMPAT=1). Its modules follow
Horovod 0.28.1's module paths and re-export hvd's objects (the same objects: `horovod.torch.allreduce is
hvd.torch.allreduce`). It never shadows a real Horovod silently: when another `horovod` package is found
further on sys.path, importing this one prints one warning line to stderr naming both locations.
"""

import os as _os
import sys as _sys
from importlib.machinery import PathFinder as _PathFinder


def _warn_if_shadowing():
    """Prints one line to stderr when a real Horovod exists on sys.path besides this compatibility layer."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    compat_dir = _os.path.realpath(_os.path.dirname(here))
    others = [entry for entry in _sys.path
              if isinstance(entry, str) and _os.path.realpath(entry or _os.curdir) != compat_dir]
    try:
        spec = _PathFinder.find_spec("horovod", others)
    except (ImportError, ValueError, OSError):
        return
    if spec is None or spec.origin is None:  # absent, or a bare directory named horovod (namespace)
        return
    installed = _os.path.dirname(spec.origin) if spec.submodule_search_locations else spec.origin
    _sys.stderr.write(f"hvd: `import horovod` uses hvd's compatibility layer ({here}); the Horovod installed "
                      f"at {installed} is not used\n")
    _sys.stderr.flush()


_warn_if_shadowing()

from horovod.runner import run  # noqa: E402,F401

__version__ = "0.28.1"
