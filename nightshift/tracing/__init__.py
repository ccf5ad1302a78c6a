"""A night's OpenTelemetry trace: one span per night run, chain and job try, emitted once each,
when it ends, with its start backdated (``docs/tracing.md``). Off unless the standard
``OTEL_*`` variables turn it on; the SDK is imported only then (``nightshift[otel]``)."""
