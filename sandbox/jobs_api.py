"""``python -m sandbox.jobs_api`` (``nightshift.sandbox.jobs_api``)."""

from nightshift.sandbox.jobs_api import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
