"""The checkout's ``tasks/``: entry points only; the code is ``nightshift.tasks``."""
