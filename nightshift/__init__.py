"""Nightshift: a team's nightly batch of external async jobs, as a library.

Importing it is cheap (no Prefect, pandas or google-genai): each sub-package pulls in what it
needs when it is used. ``config`` reads the catalogue and settings, ``engine`` runs a night,
``backends`` speak to the external job systems, ``store`` keeps the ledger and the lease,
``orchestration`` is the glue to Prefect, ``cli`` is the ``nightshift`` command.
"""

__version__ = "0.1.0"
