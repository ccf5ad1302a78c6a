"""A temporary Prefect server of our own, started before anything here imports Prefect.

Prefect's own temporary server (``SubprocessASGIServer``) is started by importing Prefect's whole
server package into the process that asks for it (about 5 s of CPU on a 2-core machine) and only
when the API is first asked. ``nightshift run`` (when no Prefect API is configured) and the demo
start the same server (uvicorn with Prefect's app, no UI, as Prefect starts it) as their first
step instead, so it starts up beside their own imports, and point ``PREFECT_API_URL`` at it (and
``TEMPORARY_PREFECT_API``, so that it is known for the night's temporary server: its slot leases
live in its memory, and a job never inherits it): the night then talks to it as to any server.
It runs in a session of its own with the reaper of ``reaper.py`` (it dies with us, even on
kill -9; a Ctrl-C for us does not reach it while the night stops), its output in a log file that
a failed start names. It stops once Prefect has sent what it still held (the night's last logs):
stopped first, Prefect's exit would retry them for over a minute.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from nightshift.cli.reaper import start_reaper
from nightshift.cli.stopping import answers_health, drain_prefect
from nightshift.config.settings import TEMPORARY_PREFECT_API

__all__ = ["OwnServer", "temporary_server_wanted"]

_START_S = 120.0  # a first start on a new database runs every migration: slow on a busy machine
_STOP_S = 5.0
_DRAIN_S = 10.0  # Prefect's last logs and events, sent before the server stops
_STARTUP_FAILED = 3  # uvicorn's exit code when its server could not start (a port taken)


class OwnServer:
    """Start with ``with``: the server process starts at once; ``ready()`` waits until it
    answers and says why it did not (None: healthy). Stopped at the ``with``'s end."""

    def __init__(self, log_path: Path) -> None:
        self._log_path = log_path
        self.api_url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._before: dict[str, str | None] = {}

    def __enter__(self) -> OwnServer:
        self._before = {k: os.environ.get(k) for k in ("PREFECT_API_URL", TEMPORARY_PREFECT_API)}
        self._start("wb")
        return self

    def _start(self, mode: str) -> None:
        """The server process on a free port, its reaper, and the environment pointed at it."""
        spec = importlib.util.find_spec("prefect")  # where it is, without importing it
        assert spec is not None and spec.origin is not None
        port = _free_port()
        self.api_url = f"http://127.0.0.1:{port}/api"
        env = os.environ | {
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        }
        argv = [
            sys.executable, "-m", "uvicorn",
            "--app-dir", str(Path(spec.origin).parent.parent),
            "--factory", "prefect.server.api.server:create_app",
            "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "error", "--lifespan", "on",
        ]  # fmt: skip
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open(mode) as log:
            self._proc = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._end_reaper()
        self._reaper = start_reaper(self._proc.pid)
        # Prefect, imported after this, talks to it as to any server (imported before: told)
        os.environ["PREFECT_API_URL"] = os.environ[TEMPORARY_PREFECT_API] = self.api_url
        _refresh_prefect()

    def ready(self, timeout_s: float = _START_S) -> str | None:
        """Wait until the server answers its health check: None, or why it never did. A server
        that could not start (uvicorn's 3: its port taken since we found it free, as Prefect's
        own temporary server allows for) is started again once, on another port."""
        assert self._proc is not None, "not started"
        deadline = time.monotonic() + timeout_s
        again = True
        while time.monotonic() < deadline:
            if (code := self._proc.poll()) is not None:
                if code == _STARTUP_FAILED and again:
                    again = False
                    self._start("ab")
                    continue
                return f"the temporary Prefect server exited with code {code} ({self._log_path})"
            if answers_health(self.api_url, timeout=2.0):
                return None
            time.sleep(0.1)
        return f"the temporary Prefect server did not start in {timeout_s:.0f} s ({self._log_path})"

    def _end_reaper(self) -> None:
        if self._reaper is not None and self._reaper.stdin is not None:
            self._reaper.stdin.close()  # its job is done: it sees the server gone and ends
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(_STOP_S)
        self._reaper = None

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None and "prefect" in sys.modules:
            drain_prefect(_DRAIN_S)  # while the server is up: at exit it retries for a minute
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(_STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._end_reaper()
        for name, value in self._before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _refresh_prefect()  # a later night in this process asks no server that is gone


def _refresh_prefect() -> None:
    """Prefect, when imported, reads the environment again (it read it at its import)."""
    if "prefect.context" in sys.modules:
        from prefect.context import refresh_global_settings_context

        refresh_global_settings_context()


def temporary_server_wanted(environ: Mapping[str, str], cwd: Path) -> bool:
    """Whether Prefect, asked for its API, would start its own temporary server: no API URL in
    its settings and its ephemeral mode on, read as Prefect 3 reads them (the environment, then
    the active profile of the profiles file, or of Prefect's default profiles when there is
    none) without importing Prefect (2-3 s). In doubt False, and Prefect decides as before: a
    settings file in ``cwd`` (``.env`` naming any PREFECT_ setting, ``prefect.toml``,
    ``pyproject.toml``'s ``[tool.prefect]``), a profiles file Prefect could not read."""
    env = {name.upper(): value for name, value in environ.items()}
    if env.get("PREFECT_API_URL"):
        return False
    try:
        if (cwd / "prefect.toml").exists() or "PREFECT_" in _text(cwd / ".env").upper():
            return False
        if "tool.prefect" in _text(cwd / "pyproject.toml"):
            return False
        profile = _active_profile(env)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError):
        return False
    profile = {str(name).upper(): value for name, value in profile.items()}
    if profile.get("PREFECT_API_URL"):
        return False
    ephemeral = next(
        (
            str(where[name])
            for where in (env, profile)
            for name in _EPHEMERAL
            if where.get(name) not in (None, "")
        ),
        "false",  # Prefect 3.9's default: no temporary server unless a profile turns it on
    )
    return ephemeral.strip().lower() in ("1", "true", "t", "yes", "y", "on")


_EPHEMERAL = ("PREFECT_SERVER_EPHEMERAL_ENABLED", "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE")


def _active_profile(env: Mapping[str, str]) -> dict[str, object]:
    """The active profile's settings, as Prefect's profiles loader finds them (``sources.py``:
    ``_get_profiles_path``, ``ProfileSettingsTomlLoader``)."""
    spec = importlib.util.find_spec("prefect")  # where it is, without importing it
    if spec is None or spec.origin is None:
        raise ValueError("Prefect is not installed")
    bundled = Path(spec.origin).parent / "settings" / "profiles.toml"
    if env.get("PREFECT_PROFILES_PATH"):
        path = Path(env["PREFECT_PROFILES_PATH"])
    elif env.get("PREFECT_HOME"):
        path = Path(env["PREFECT_HOME"]) / "profiles.toml"
    else:
        path = Path.home() / ".prefect" / "profiles.toml"
        path = path if path.exists() else bundled
    defaults = tomllib.loads(bundled.read_text(encoding="utf-8"))
    found = defaults.get("profiles", {}).get(defaults.get("active", "ephemeral"), {})
    if path.expanduser().exists():
        profiles = tomllib.loads(path.expanduser().read_text(encoding="utf-8"))
        active = env.get("PREFECT_PROFILE") or profiles.get("active")
        found = profiles.get("profiles", {}).get(active, found) if active else found
    if not isinstance(found, dict):
        raise ValueError(f"the active profile of {path} is not a table")
    return found


def _text(path: Path) -> str:
    """A settings file's text; empty when there is none."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
