"""The catalogue's ``notify:`` section: where each severity's message goes, and how to reach Slack.

Only names live here (an environment variable, a Prefect Secret block): token and webhook values
are read when a message is sent (``nightshift.notify.send``) and never stored or printed.

    notify:
      env: production
      slack: {token: SLACK_BOT_TOKEN, base_url: null}     # or token_block: <Secret block>
      routes:
        failed:  {channel: "#batch-alerts", mention: "<!here>"}
        partial: {channel: "#batch-digest"}
        ok:      null                                      # silent; a channel = heartbeat
        alert:   {channel: "#batch-alerts"}
        # a team without a bot: {webhook: SLACK_WEBHOOK_URL} (or webhook_block: <Secret block>)
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

__all__ = ["ROUTES", "NotifyConfig", "Route", "SlackSettings"]

ROUTES = ("failed", "partial", "ok", "alert")
# what Slack turns into a ping: <!here>, <!channel>, <!everyone>, <@U123>, <!subteam^S123>
_MENTION = re.compile(r"<(!here|!channel|!everyone|@[UW][A-Z0-9]+|!subteam\^[A-Z0-9]+)>")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_name(value: str) -> str:
    # the message never repeats the value: it may be a token pasted in by mistake
    if not _ENV_NAME.fullmatch(value):
        raise ValueError("must name an environment variable (e.g. SLACK_BOT_TOKEN), not a value")
    return value


def _mention(value: str) -> str:
    if not _MENTION.fullmatch(value):
        raise ValueError('use Slack\'s syntax: "<!here>", "<!channel>", "<@U0123ABC>"')
    return value


EnvVar = Annotated[str, AfterValidator(_env_name)]
Mention = Annotated[str, AfterValidator(_mention)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SlackSettings(_Strict):
    """How the bot reaches Slack: the token's environment variable or Secret block, the API URL."""

    token: EnvVar | None = "SLACK_BOT_TOKEN"
    token_block: str | None = Field(None, min_length=1)
    base_url: str | None = Field(None, pattern=r"^https?://")
    timeout: Annotated[float, Field(gt=0, le=120)] = 10.0

    @model_validator(mode="after")
    def _one_token_source(self) -> SlackSettings:
        if self.token_block and "token" in self.model_fields_set and self.token:
            raise ValueError("give token (an env var name) or token_block, not both")
        return self

    @property
    def token_setting(self) -> str:
        """What to fix when the token is refused, for a person: the variable or the block."""
        if self.token_block:
            return f"notify.slack.token_block (Prefect Secret block {self.token_block!r})"
        return f"notify.slack.token (environment variable {self.token})"


class Route(_Strict):
    """One destination: a bot channel (with an optional mention) or an incoming webhook."""

    channel: str | None = Field(None, pattern=r"^[#@]?[A-Za-z0-9._-]+$", max_length=80)
    mention: Mention | None = None
    webhook: EnvVar | None = None
    webhook_block: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one_destination(self) -> Route:
        given = [n for n in ("channel", "webhook", "webhook_block") if getattr(self, n)]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of channel, webhook (an env var name), webhook_block"
            )
        return self

    @property
    def target(self) -> str:
        """Where it goes, safe to print: ``#batch-alerts`` or ``webhook $SLACK_WEBHOOK_URL``."""
        if self.channel:
            return self.channel
        if self.webhook:
            return f"webhook ${self.webhook}"
        return f"webhook block {self.webhook_block!r}"


class Routes(_Strict):
    failed: Route | None = None
    partial: Route | None = None
    ok: Route | None = None
    alert: Route | None = None


class NotifyConfig(_Strict):
    """The ``notify:`` section; no section means nothing is sent."""

    env: str = Field("production", min_length=1, max_length=40)
    slack: SlackSettings = SlackSettings()
    routes: Routes = Routes()
    ui_url: str | None = Field(None, pattern=r"^https?://")  # the Prefect UI, for flow-run links
    alert_levels: list[Literal["watch", "alert"]] = ["alert"]  # which in-night levels are sent

    def route(self, name: str) -> Route | None:
        """The route of a severity (``failed``, ``partial``, ``ok``) or ``alert``; None: silent."""
        return getattr(self.routes, name) if name in ROUTES else None
