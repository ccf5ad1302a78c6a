"""Whether and how a night is traced, as every OpenTelemetry program is told: the standard
variables, read once when the night begins. Values, no I/O.

Off unless the environment says otherwise: ``OTEL_TRACES_EXPORTER`` names ``otlp`` (HTTP and
protobuf, to ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``, which the
exporter reads itself with its headers and timeout) or ``console``, or an OTLP endpoint is set
with no exporter named; ``none`` or ``OTEL_SDK_DISABLED=true`` keeps it off. Sampling is
``OTEL_TRACES_SAMPLER`` (``OTEL_TRACES_SAMPLER_ARG`` its ratio), decided once per night run: a
night's spans are all kept or all dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["TraceSettings", "trace_settings"]

_EXPORTERS = ("otlp", "console", "memory")  # memory: the tests' in-memory exporter
_SAMPLERS = {
    "always_on": (1.0, False),
    "always_off": (0.0, False),
    "traceidratio": (None, False),
    "parentbased_always_on": (1.0, True),
    "parentbased_always_off": (0.0, True),
    "parentbased_traceidratio": (None, True),
}


@dataclass(frozen=True)
class TraceSettings:
    """``exporters`` empty: off. ``ratio`` the share of night runs kept; ``follow_parent``: a
    night started inside a sampled (or dropped) trace follows it. ``problems``: lines to say
    once (a sampler or exporter nightshift does not know)."""

    exporters: tuple[str, ...] = ()
    ratio: float = 1.0
    follow_parent: bool = True
    problems: tuple[str, ...] = ()

    @property
    def on(self) -> bool:
        return bool(self.exporters)

    def sampled(self, trace_id: int, parent: bool | None = None) -> bool:
        """Whether a night run with this trace id is kept (``parent``: its parent's flag)."""
        if parent is not None and self.follow_parent:
            return parent
        if self.ratio >= 1.0:
            return True
        # as the SDK's TraceIdRatioBased: the trace id's low 64 bits against the ratio
        return (trace_id & 0xFFFFFFFFFFFFFFFF) < int(self.ratio * (1 << 64))


def trace_settings(environ: Mapping[str, str]) -> TraceSettings:
    """The night's tracing, from ``environ``."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TraceSettings()
    problems: list[str] = []
    named = environ.get("OTEL_TRACES_EXPORTER")
    if named is None:
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        wanted = ["otlp"] if endpoint else []
    else:
        wanted = [n.strip().lower() for n in named.split(",") if n.strip()]
    exporters: list[str] = []
    for name in wanted:
        if name == "none":
            return TraceSettings()
        if name in _EXPORTERS and name not in exporters:
            exporters.append(name)
        elif name not in _EXPORTERS:
            problems.append(
                f"OTEL_TRACES_EXPORTER={name}: not one nightshift ships (otlp, console)"
            )
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if "otlp" in exporters and protocol != "http/protobuf":
        problems.append(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: exporting http/protobuf")
    sampler = environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    if sampler not in _SAMPLERS:
        problems.append(f"OTEL_TRACES_SAMPLER={sampler}: not known; every night is kept")
        sampler = "parentbased_always_on"
    ratio, follow = _SAMPLERS[sampler]
    if ratio is None:
        arg = environ.get("OTEL_TRACES_SAMPLER_ARG", "1.0")
        try:
            ratio = min(1.0, max(0.0, float(arg)))
        except ValueError:
            problems.append(f"OTEL_TRACES_SAMPLER_ARG={arg}: not a number; every night is kept")
            ratio = 1.0
    return TraceSettings(tuple(exporters), ratio, follow, tuple(problems))
