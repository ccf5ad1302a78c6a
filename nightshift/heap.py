"""Hand the memory the C allocator keeps after it was freed back to the system (a leaf).

A night of thousands of jobs allocates and frees a lot from several threads; glibc keeps what
was freed in its arenas, so the process's RSS only grows (measured in ``bench/scale.py``: at
the highest RSS of a 600-job night only 34 MB are live Python objects). ``malloc_trim(0)``
returns the free pages at the top and inside each arena, as Dask's workers do for the same
reason. Where the C library has no ``malloc_trim`` (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

__all__ = ["TRIM_EVERY_S", "trimmer"]

TRIM_EVERY_S = 10.0  # how often a night hands freed memory back, in seconds


def trimmer() -> Callable[[], bool] | None:
    """A function that trims the C heap (True if it gave memory back), or None if it can't."""
    if not sys.platform.startswith("linux"):
        return None
    try:  # by its soname: find_library would start a subprocess (ldconfig) at every night
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: bool(trim(0))
