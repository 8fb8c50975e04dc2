"""``create_app``: the Falcon application every appliance surface starts from.

The middleware order is the security order: ``BearerAuth`` first (before routing, before any
body read), then ``BodyCap`` (declared length vs the cap, still before the responder). Errors of
every kind render in the shared JSON shape (appliance.http.errors). Nothing is mounted that the
caller did not pass: unknown paths are 404 — but only after authentication, so an anonymous
caller cannot even map the routes.

The app carries its ``BearerAuth`` (``bearer_gate``) and its fixed error fields (``error_extra``)
so the server can refuse a request whose bearer is wrong as soon as its headers are in, before a
single body byte is read, in the surface's own error shape (appliance.http.server).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import falcon

from appliance.http.auth import BearerAuth, CredentialTable
from appliance.http.errors import make_error_serializer
from appliance.http.limits import BodyCap
from appliance.secret import Secret


class ApplianceApp(falcon.App):
    """A Falcon app that tells its server how to authenticate before the body is read."""

    bearer_gate: BearerAuth | None = None
    error_extra: Mapping[str, Any] = {}


def create_app(
    *,
    routes: Mapping[str, Any],
    credentials: CredentialTable | Mapping[str, Secret | str | None],
    accepted_roles: Iterable[str],
    body_bytes_max: int,
    surface: str,
    error_extra: Mapping[str, Any] | None = None,
    extra_middleware: Iterable[Any] = (),
) -> ApplianceApp:
    """A WSGI app with bearer auth and a body cap in front of ``routes`` (path → resource).

    ``extra_middleware`` runs AFTER auth and the cap (e.g. an Origin check for management).
    """
    auth = BearerAuth(credentials, accepted_roles, surface=surface)
    app = ApplianceApp(middleware=[auth, BodyCap(body_bytes_max), *extra_middleware])
    app.bearer_gate = auth
    app.error_extra = dict(error_extra) if error_extra else {}
    app.req_options.auto_parse_form_urlencoded = False
    app.req_options.strip_url_path_trailing_slash = False
    app.set_error_serializer(make_error_serializer(error_extra))
    for path, resource in routes.items():
        app.add_route(path, resource)
    return app
