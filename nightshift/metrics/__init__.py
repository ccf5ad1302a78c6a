"""Prometheus metrics of the nights, read from the ledger: a textfile and, optionally, a push.

``families`` turns plain rows into metric families (pure); ``ledger_rows`` reads those rows from
the ledger database (aggregated in SQL); ``export`` writes the node-exporter textfile atomically
and pushes to a Pushgateway when one is configured. A failure to export costs a log line only.
"""
