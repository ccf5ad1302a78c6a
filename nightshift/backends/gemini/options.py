"""The options of a gemini_batch job, read from its JobSpec."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nightshift.backends.base import JobSpec
from nightshift.backends.gemini.pricing import Price
from nightshift.config.durations import parse_duration
from nightshift.errors import PermanentBackendError

__all__ = ["GeminiJobOptions"]


@dataclass(frozen=True)
class GeminiJobOptions:
    """The ``JobSpec.options`` of a gemini_batch job."""

    model: str
    input: Path
    output: Path
    sla_s: float | None = None
    fallback: str = "on_demand"
    inline_threshold_rows: int = 1000
    inline_threshold_bytes: int = 10 * 1024 * 1024
    prices: dict[str, Price] = field(default_factory=dict)  # the catalogue's, over built-ins
    spend_usd: float | None = None  # the job's own spend cap (`spend: {usd: ...}`)

    @classmethod
    def from_spec(cls, spec: JobSpec) -> GeminiJobOptions:
        """Options from a spec; a missing field is a PermanentBackendError."""
        opts = spec.options
        missing = [k for k in ("model", "input", "output") if not opts.get(k)]
        if missing:
            raise PermanentBackendError(f"gemini job {spec.label!r}: options lack {missing}")
        if opts.get("fallback", "on_demand") not in ("on_demand", "none"):
            raise PermanentBackendError(
                f"gemini job {spec.label!r}: fallback must be on_demand|none"
            )
        sla = opts.get("sla")
        spend = opts.get("spend")
        return cls(
            model=str(opts["model"]),
            input=Path(opts["input"]),
            output=Path(opts["output"]),
            sla_s=parse_duration(sla) if sla is not None else None,
            fallback=opts.get("fallback", "on_demand"),
            inline_threshold_rows=int(opts.get("inline_threshold_rows", 1000)),
            inline_threshold_bytes=int(opts.get("inline_threshold_bytes", 10 * 1024 * 1024)),
            prices={
                str(model): Price(float(p["input"]), float(p["output"]))
                for model, p in (opts.get("prices") or {}).items()
            },
            spend_usd=float(spend["usd"]) if isinstance(spend, dict) and "usd" in spend else None,
        )

    @property
    def retry_file(self) -> Path:
        """``<output stem>.retry.jsonl`` beside the output."""
        return self.output.with_name(self.output.stem + ".retry.jsonl")
