"""How messages name a catalogue: its ``name``, else its file's stem; never a local path."""

from __future__ import annotations

from pathlib import PurePath

__all__ = ["DEFAULT_NAME", "shown_name"]

DEFAULT_NAME = "nightshift"  # a catalogue with neither a name nor a file


def shown_name(key: str) -> str:
    """A catalogue key as people read it: a key that is a file's path becomes the file's stem."""
    if "/" in key or "\\" in key:
        return PurePath(key.replace("\\", "/")).stem or DEFAULT_NAME
    return key or DEFAULT_NAME
