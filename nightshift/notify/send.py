"""Posting one message with slack-sdk: ``WebClient`` for a bot channel, ``WebhookClient`` for an
incoming webhook, both with retry handlers (429 honouring Retry-After up to a bound, 500/503,
connection errors) and a bounded timeout.

The token and the webhook URL are read from the environment (or a Prefect Secret block) when a
message is sent, and appear in no line this module writes: a refusal is one line naming the
setting to fix (``notify.slack.token (environment variable SLACK_BOT_TOKEN)``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from nightshift.config.notify import Route, SlackSettings
from nightshift.secret_blocks import read_secret_block

__all__ = ["SLACK_API", "Delivery", "SlackSender"]

SLACK_API = "https://slack.com/api/"
_TOKEN_ERRORS = {"invalid_auth", "not_authed", "account_inactive", "token_revoked",
                 "token_expired", "no_permission", "missing_scope"}  # fmt: skip
_CHANNEL_ERRORS = {"channel_not_found", "is_archived", "channel_is_archived", "no_service"}
# slack-sdk logs request headers (the token) at DEBUG and every failed attempt at ERROR: its
# logger is silenced, our own one line per message says what happened
_SDK_LOG = logging.getLogger("nightshift.notify.slack_sdk")
_SDK_LOG.setLevel(logging.CRITICAL)
_SDK_LOG.propagate = False


@dataclass(frozen=True)
class Delivery:
    """What Slack said: accepted (with the message's ``ts`` for a bot post) or why not.

    ``permanent``: a setting is wrong (token, channel, webhook); retrying alone will not help.
    """

    ok: bool
    ts: str | None = None
    error: str | None = None
    permanent: bool = False


class SlackSender:
    """Post messages for one ``notify.slack`` setting; thread-safe (a client per call)."""

    def __init__(
        self,
        settings: SlackSettings,
        *,
        env: Mapping[str, str] | None = None,
        retries: int = 2,
        max_retry_after_s: int = 60,
        backoff_s: float = 0.5,
        secret: Callable[[str], str] | None = None,
    ) -> None:
        self.settings = settings
        self._env = env if env is not None else os.environ
        self._retries = retries
        self._max_retry_after = max_retry_after_s
        self._backoff = backoff_s
        self._secret = secret or read_secret_block

    @property
    def api_url(self) -> str:
        """The Web API base URL (``https://slack.com/api/`` unless ``base_url`` says otherwise)."""
        base = self.settings.base_url or SLACK_API
        return base if base.endswith("/") else base + "/"

    def post(
        self, route_name: str, route: Route, text: str, blocks: list[dict[str, Any]],
        thread_ts: str | None = None,
    ) -> Delivery:  # fmt: skip
        """Send one message to ``route``; never raises for what Slack or the network does."""
        if route.channel:
            return self._post_api(route_name, route.channel, text, blocks, thread_ts)
        return self._post_webhook(route_name, route, text, blocks)

    # -- bot token -----------------------------------------------------------------------
    def _post_api(
        self, route_name: str, channel: str, text: str, blocks: list[dict[str, Any]],
        thread_ts: str | None,
    ) -> Delivery:  # fmt: skip
        from slack_sdk import WebClient
        from slack_sdk.errors import SlackApiError

        token, problem = self._token()
        if token is None:
            return Delivery(False, error=problem, permanent=True)
        client = WebClient(
            token=token, base_url=self.api_url, timeout=max(1, round(self.settings.timeout)),
            retry_handlers=self._handlers(), logger=_SDK_LOG,
        )  # fmt: skip
        kwargs: dict[str, Any] = {"channel": channel, "text": text, "blocks": blocks}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        try:
            response = client.chat_postMessage(**kwargs)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or f"HTTP {exc.response.status_code}")
            return self._refused(route_name, channel, error, exc.response.status_code, token)
        except Exception as exc:  # URLError, timeouts, resets: Slack could not be reached
            return Delivery(False, error=self._unreachable(self.api_url, exc, token))
        return Delivery(True, ts=str(response.get("ts") or "") or None)

    def _token(self) -> tuple[str | None, str]:
        where = self.settings.token_setting
        if self.settings.token_block:
            try:
                return self._secret(self.settings.token_block), ""
            except Exception:  # a missing block, an unreachable Prefect API
                return None, f"cannot read the Slack token: fix {where}"
        value = self._env.get(self.settings.token or "")
        return (value, "") if value else (None, f"no Slack token: set {where}")

    def _refused(
        self, route_name: str, channel: str, error: str, status: int, secret: str
    ) -> Delivery:
        if error in _TOKEN_ERRORS:
            line = f"Slack refused the token ({error}): fix {self.settings.token_setting}"
            return Delivery(False, error=line, permanent=True)
        if error in _CHANNEL_ERRORS:
            line = f"Slack has no channel {channel} ({error}): fix notify.routes.{route_name}"
            return Delivery(False, error=line, permanent=True)
        if error == "not_in_channel":
            line = (
                f"the Slack bot is not in {channel} (not_in_channel): invite it there, "
                f"or fix notify.routes.{route_name}"
            )
            return Delivery(False, error=line, permanent=True)
        line = f"Slack did not accept the message to {channel}: {error}"
        if status == 429:
            line += " (rate limited after retries)"
        return Delivery(False, error=_scrub(line, secret), permanent=status < 500 and status != 429)

    # -- incoming webhook ---------------------------------------------------------------
    def _post_webhook(
        self, route_name: str, route: Route, text: str, blocks: list[dict[str, Any]]
    ) -> Delivery:
        from slack_sdk.webhook import WebhookClient

        where = f"notify.routes.{route_name}.webhook" + (
            f" (environment variable {route.webhook})" if route.webhook
            else f"_block (Prefect Secret block {route.webhook_block!r})"
        )  # fmt: skip
        try:
            url = (
                self._env.get(route.webhook or "")
                if route.webhook
                else self._secret(route.webhook_block or "")
            )
        except Exception:
            url = None
        if not url:
            return Delivery(False, error=f"no Slack webhook URL: set {where}", permanent=True)
        client = WebhookClient(
            url, timeout=max(1, round(self.settings.timeout)), retry_handlers=self._handlers(),
            logger=_SDK_LOG,
        )  # fmt: skip
        try:
            response = client.send(text=text, blocks=blocks)
        except Exception as exc:
            return Delivery(False, error=self._unreachable(url, exc, url, shown=route.target))
        if response.status_code == 200:
            return Delivery(True)
        body = _scrub((response.body or "").strip()[:100], url)
        line = f"the Slack webhook refused the message (HTTP {response.status_code} {body})"
        if response.status_code in (403, 404, 410):
            return Delivery(False, error=f"{line}: fix {where}", permanent=True)
        return Delivery(False, error=line)

    # -- shared ---------------------------------------------------------------------------
    def _handlers(self) -> list[Any]:
        from slack_sdk.http_retry.builtin_handlers import (
            ConnectionErrorRetryHandler,
            RateLimitErrorRetryHandler,
            ServerErrorRetryHandler,
        )
        from slack_sdk.http_retry.builtin_interval_calculators import (
            BackoffRetryIntervalCalculator,
        )

        interval = BackoffRetryIntervalCalculator(backoff_factor=self._backoff)
        limit = self._max_retry_after

        class BoundedRateLimit(RateLimitErrorRetryHandler):
            """Honour Retry-After up to ``max_retry_after_s``; longer waits go to the outbox."""

            def _can_retry(self, *, state: Any, request: Any, response: Any = None,
                           error: Any = None) -> bool:  # fmt: skip
                if response is None or response.status_code != 429:
                    return False
                values = {k.lower(): v for k, v in response.headers.items()}.get("retry-after")
                wait = values[0] if isinstance(values, list) and values else values
                try:
                    return int(wait or 1) <= limit
                except (TypeError, ValueError):
                    return True

        return [
            BoundedRateLimit(max_retry_count=self._retries),
            ServerErrorRetryHandler(max_retry_count=self._retries, interval_calculator=interval),
            ConnectionErrorRetryHandler(
                max_retry_count=self._retries, interval_calculator=interval
            ),
        ]

    def _unreachable(self, url: str, exc: Exception, secret: str, shown: str | None = None) -> str:
        parsed = urlparse(url)
        where = shown or f"{parsed.scheme}://{parsed.netloc}"
        reason = getattr(exc, "reason", None) or exc
        return _scrub(f"cannot reach Slack at {where}: {type(exc).__name__}: {reason}", secret)


def _scrub(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` (a token, a webhook URL and its path) replaced by ``***``."""
    if not secret:
        return text
    text = text.replace(secret, "***")
    path = urlparse(secret).path
    return text.replace(path, "/***") if len(path) > 8 else text
