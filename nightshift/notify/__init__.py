"""Telling people how the night went: Slack messages routed by severity, alerts threaded, and an
outbox so nothing is lost while Slack is down.

``config`` (the catalogue's ``notify:``), ``render`` (pure: summaries and alerts to messages),
``send`` (slack-sdk clients with retries), ``notifier`` (routing, threads, outbox; what the flow
and an AlertSink call). Importing this package imports neither slack-sdk nor the database.
"""
