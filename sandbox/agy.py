"""``python -m sandbox.agy``: the fake job CLI (``nightshift.sandbox.agy``)."""

from nightshift.sandbox.agy import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
