"""``ManagementListener``: the management app served by waitress on a loopback address only.

Startup refuses a non-loopback address even if a config slipped past validation (SPEC §2 "fail
closed"): the listener has no TLS and no browser flow, and its credentials must never cross a
network. ``localhost`` is refused too: only literal 127.0.0.0/8 or ::1 is loopback by
construction (appliance.config.addresses).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from appliance.config.addresses import HostPort, is_loopback_host
from appliance.config.credentials import RunnerCredentials
from appliance.core.limits import LimitsInForce
from appliance.http import HttpServer
from appliance.management.app import (
    ManagementOptions,
    Observability,
    create_management_app,
)
from appliance.management.gateway import CommandGateway
from appliance.secret import Secret


class NotLoopback(ValueError):
    """The management address is not a loopback IP literal."""


class ManagementListener:
    """Start/stop the operator listener; ``port`` is the bound port (useful with port 0)."""

    def __init__(
        self,
        addr: HostPort,
        gateway: CommandGateway,
        credentials: RunnerCredentials | Mapping[str, Secret | str | None],
        limits: LimitsInForce,
        options: ManagementOptions | None = None,
        *,
        threads: int = 8,
        observability: Observability | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if not is_loopback_host(addr.host):
            raise NotLoopback(
                f"management.addr must be a loopback address (127.0.0.0/8 or ::1), got {addr}"
            )
        self.options = options or ManagementOptions()
        app = create_management_app(gateway, credentials, limits, self.options, observability)
        self._server = HttpServer(
            app,
            host=addr.host,
            port=addr.port,
            name="management",
            body_bytes_max=self.options.request_bytes_max,
            threads=threads,
            ssl_context=ssl_context,  # management.tls (appliance.http.tls)
        )

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def host(self) -> str:
        return self._server.host

    def start(self) -> ManagementListener:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> ManagementListener:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
