"""``python -m sandbox.gemini_emulator`` (``nightshift.sandbox.gemini_emulator``)."""

from nightshift.sandbox.gemini_emulator import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
