"""The checkout's ``flows/``: entry points only; the code is ``nightshift.flows``."""
