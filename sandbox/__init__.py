"""The checkout's ``sandbox/``: entry points only; the code is ``nightshift.sandbox``."""
