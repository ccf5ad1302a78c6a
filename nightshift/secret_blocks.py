"""A Prefect Secret block's value (a Slack token, an http job's token, a Gemini key)."""

from __future__ import annotations

from typing import Any

__all__ = ["read_secret_block"]


def read_secret_block(name: str) -> str:
    """The value of the Prefect Secret block ``name``, read now on this thread.

    ``_sync=True``: left to itself Prefect's ``load`` hands back a coroutine wherever it guesses
    an async caller (a running loop; an async task run's context, copied to a thread), and the
    value was then "not readable".
    """
    from prefect.blocks.system import Secret  # deferred: importing prefect costs ~1 s

    secret: Any = Secret.load(name, _sync=True)  # type: ignore[call-arg]
    return str(secret.get())
