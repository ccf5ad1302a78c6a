"""A running night as its Prefect tasks and chains see it: handed to them, not looked up."""

from __future__ import annotations

from nightshift.engine.context import NightContext
from nightshift.engine.steps import JobPools

__all__ = ["Night"]


class Night:
    """The night's context, its job pools, and the jobs an earlier run of it did.

    Handed to a task or a chain as a parameter wrapped in ``prefect...annotations.quote`` (Prefect
    does not walk into it). Slots, not a dataclass: a chain's parameters are encoded for the
    API, and with no ``__dict__`` the encoder stores a placeholder instead of walking (and
    deep-copying) the night's live objects.
    """

    __slots__ = ("ctx", "kept", "pools")

    def __init__(self, ctx: NightContext, pools: JobPools, kept: set[str] | None = None) -> None:
        self.ctx = ctx
        self.pools = pools
        self.kept = kept if kept is not None else set()  # succeeded in an earlier run
