"""File names for job labels, and writing files so that a crash never leaves half of one."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["label_filename", "write_atomic"]

_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_.+-]+")


def label_filename(label: str) -> str:
    """A job label as a file or folder name (its log tail, its command job): ':' becomes '+'.

    Catalogue labels match ``^[a-z0-9:_.-]+$``: '+' is never in one, so no two labels share a
    name (``gen:a`` -> ``gen+a``, ``gen_a`` stays). Anything a label can't hold (a backend
    driven directly, not from a catalogue) becomes '-', '/' among it.
    """
    return _NOT_IN_NAMES.sub("-", label.replace(":", "+"))


def write_atomic(path: Path, content: str | Iterable[bytes]) -> None:
    """Write ``content`` to a temp file beside ``path``, fsync it, then rename it into place.

    ``content``: text (UTF-8), or bytes given a part at a time (a file too big to hold whole,
    such as a big catalogue's metrics textfile)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600; results are for the team, so honour the umask instead
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            for part in [content.encode("utf-8")] if isinstance(content, str) else content:
                fh.write(part)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
