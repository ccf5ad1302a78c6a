"""``python -m sandbox.slack_emulator`` (``nightshift.sandbox.slack_emulator``)."""

from nightshift.sandbox.slack_emulator import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
