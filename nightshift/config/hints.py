"""What a catalogue problem's message adds for the fix: a did-you-mean, where a key belongs.

Pure: the model classes' field names are the vocabulary. ``unknown_key`` words the message of a
key the model does not have at that place (``depend_on`` -> did you mean ``depends_on``; a job's
``retries:`` is set for the whole night under ``defaults:``; one schedule starts the whole night);
``type_hint`` gives the right form of a value of the wrong type (``argv`` as a list).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["type_hint", "unknown_key"]

# keys people put on a job that belong elsewhere: where they go, in words
_SCHEDULE = (
    "one schedule starts the whole night: set it on the nightly deployment in prefect.yaml "
    "(schedules: [{cron: ...}]), not per job"
)
_ELSEWHERE = {
    "schedule": _SCHEDULE,
    "schedules": _SCHEDULE,
    "cron": _SCHEDULE,
}


def unknown_key(
    key: str, known: Iterable[str], *, in_job: bool, defaults: Iterable[str] = ()
) -> str:
    """The message for ``key``, unknown where it is; ``known``: the keys allowed there;
    ``defaults``: the keys of ``defaults:`` (a job key that is one belongs there)."""
    if key in _ELSEWHERE:
        return f"unknown key: {_ELSEWHERE[key]}"
    if in_job and key in set(defaults):
        return (
            f"unknown key here: {key} is set for the whole night, under defaults: (defaults.{key})"
        )
    if not in_job and key in set(defaults):
        return f"unknown key here: {key} belongs under defaults: (defaults.{key})"
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f"unknown key; did you mean {close[0]}?" if close else "unknown key"


def type_hint(field: str, err_type: str, value: Any) -> str | None:
    """The right form of ``field`` when its value has the wrong type (None: nothing to add)."""
    if field == "argv" and err_type == "list_type":
        return (
            'argv is a list, one item per argument: argv: [sh, -c, "a | b"] (a string is not '
            "split; [sh, -c, ...] runs a pipe or a whole command line)"
        )
    if field in ("depends_on", "only") and err_type == "list_type" and isinstance(value, str):
        return f"{field} is a list of labels: {field}: [{value}]"
    return None
