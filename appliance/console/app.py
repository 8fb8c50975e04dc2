"""``create_console_app``: the web console's routes (Falcon), server-rendered.

Routes (the table is in docs/console.md): ``GET /`` (the overview; the login page without a
session), ``GET /login`` and ``POST /login`` (the dashboard token, or a quickstart nonce, for a
session cookie), ``POST /logout``, ``GET /schedules`` (``?sort=&order=&page=``), ``GET
/schedules/{id}``, ``GET /occurrences/{id}``, ``GET /events[?occurrence=ID]`` (the live view,
``text/event-stream``: appliance/console/pusher.py), ``GET /confirm`` and ``POST /actions``
(only with ``console.actions``), ``GET /static/{name}`` (the stylesheet and the script).

Every page is a local view of this voter (like ``list``). Nothing here reaches
``acknowledge_stopped`` or an admin command (appliance/console/actions.py).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final, Protocol

import falcon

from appliance.console import actions as console_actions
from appliance.console.chart import run_chart
from appliance.console.feed import EventHub, LiveSource, sse_message
from appliance.console.guard import ConsoleGate, ConsoleGuard, Identity
from appliance.console.pusher import Pusher
from appliance.console.render import Renderer
from appliance.console.sessions import COOKIE_NAME, SessionBook
from appliance.console.takeover import TAKEOVER_KEY
from appliance.console.views import (
    Calendars,
    Snapshot,
    drop_rows,
    recent_occurrences,
    schedule_detail,
    schedule_rows,
    snapshot,
    sorted_page,
)
from appliance.http.app import ApplianceApp
from appliance.http.auth import CredentialTable
from appliance.http.errors import error_body
from appliance.http.limits import BodyCap, read_body
from appliance.management.commands import Refused
from appliance.management.gateway import CommandGateway
from appliance.metrics.attempt_report import (
    ATTEMPTS_FETCHED_MAX,
    attempt_report,
    dispatched_attempts,
)
from appliance.metrics.history import occurrence_view
from appliance.owner.report_text import retry_note

log = logging.getLogger("appliance.console")

KiB: Final = 1024
FORM_BYTES_MAX: Final = 8 * KiB
STATIC_FILES: Final = {
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
EVENT_RETRY_MS: Final = 2000
REPLY_TIMEOUT_S: Final = 30.0


class RunnerView(Protocol):
    """What the console reads from its voter (a live ``Runner`` and its observability)."""

    def read(self, fn: Callable[[Any], Any]) -> Any: ...

    def now_s(self) -> float: ...

    def observe(self, execution_id: str) -> tuple[str | None, Any]: ...

    def health(self) -> dict[str, Any]: ...

    def limits(self) -> Any: ...


@dataclass
class ConsoleParts:
    """Everything the routes share (built by ``ConsoleService``)."""

    node_id: str
    view: RunnerView
    sessions: SessionBook
    credentials: CredentialTable
    pusher: Pusher
    hub: EventHub
    source: LiveSource
    gateway: CommandGateway | None  # None: actions are off
    tls: bool = False
    clock: Callable[[], float] = time.time  # wall clock of sessions (not the scaled one)
    calendars: Calendars = field(default_factory=Calendars)
    reply_timeout_s: float = REPLY_TIMEOUT_S


def _html(resp: falcon.Response, text: str, status: int = 200) -> None:
    resp.status = falcon.code_to_http_status(status)
    resp.content_type = "text/html; charset=utf-8"
    resp.text = text


def _page_int(req: falcon.Request, name: str, default: int) -> int:
    text = req.get_param(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise falcon.HTTPBadRequest(title="invalid_query", description=f"{name}: not a number")
    return int(text)


class _Page:
    """A page: renders with the session's CSRF token and the live view's wiring."""

    def __init__(self, parts: ConsoleParts, renderer: Renderer) -> None:
        self.parts = parts
        self.renderer = renderer

    def snap(self) -> Snapshot:
        return self.parts.view.read(snapshot)

    def render(self, req: falcon.Request, template: str, **fields: Any) -> str:
        identity: Identity | None = req.context.identity
        csrf = identity.session.csrf if identity and identity.session else None
        fields["events_url"] = _resuming(fields.get("events_url", "/events"), req)
        fields.setdefault("actions", self.parts.gateway is not None)
        return self.renderer.page(template, csrf=csrf, **fields)


def _resuming(events_url: str | None, req: falcon.Request) -> str | None:
    """The page's stream resumes at the news id read before the page read its state
    (``NewsMark``), so what changes while the page is rendered and opened still reaches it."""
    news_id = req.context.get("news_id")
    if events_url is None or news_id is None:
        return events_url
    return f"{events_url}{'&' if '?' in events_url else '?'}after={news_id}"


class NewsMark:
    """Middleware: the hub's newest id, read before a page reads anything (``_resuming``)."""

    def __init__(self, hub: EventHub) -> None:
        self.hub = hub

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if isinstance(resource, _Page):
            req.context.news_id = self.hub.last_id


class Overview(_Page):
    public = True  # without a session it answers the login page

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.context.identity is None:
            _html(resp, login_page(self.renderer, req, None))
            return
        snap = self.snap()
        health = self.parts.view.health()
        warnings = list(health.get("warnings") or [])
        if snap.paused_since_s is not None:
            warnings.insert(
                0,
                {
                    "code": "paused",
                    "severity": "warning",
                    "message": "scheduling is paused cluster-wide: nothing is selected or "
                    "started until resume",
                },
            )
        voters = health.get("voters") or []
        worker = health.get("worker")
        _html(
            resp,
            self.render(
                req,
                "overview.html",
                title="overview",
                health=health,
                me=next((v for v in voters if v.get("self")), {}),
                warnings=warnings,
                workers=[worker] if worker else [],
                recent=recent_occurrences(snap),
                names={sid: s.definition.name for sid, s in snap.schedules.items()},
                paused_since=snap.paused_since_s,
                streams=self.parts.pusher,
            ),
        )


class Schedules(_Page):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        sort = req.get_param("sort") or "id"
        order = req.get_param("order") or "asc"
        page = _page_int(req, "page", 1)
        snap = self.snap()
        rows = schedule_rows(snap, self.parts.view.now_s(), self.parts.calendars)
        try:
            listing = sorted_page(rows, sort, order, page)
        except ValueError as exc:
            raise falcon.HTTPBadRequest(title="invalid_query", description=str(exc)) from None
        _html(
            resp,
            self.render(
                req,
                "schedules.html",
                title="schedules",
                listing=listing,
                paused_since=snap.paused_since_s,
            ),
        )


class Schedule(_Page):
    def on_get(self, req: falcon.Request, resp: falcon.Response, schedule_id: int) -> None:
        snap = self.snap()
        detail = schedule_detail(snap, schedule_id, self.parts.view.now_s(), self.parts.calendars)
        if detail is None:
            raise falcon.HTTPNotFound(
                title="no_such_schedule", description=f"no schedule {schedule_id}"
            )
        _html(
            resp,
            self.render(
                req,
                "schedule.html",
                title=f"schedule {schedule_id}",
                detail=detail,
                policy_json=json.dumps(detail.definition["policy"], indent=2, sort_keys=True),
                jitter_s=detail.schedule.definition.policy.jitter_seconds,
                chart=run_chart(detail.points),
                drops=drop_rows(detail.progress),
                paused_since=snap.paused_since_s,
                live_keys={"schedule-id": schedule_id},
            ),
        )


def attempts_with_reports(
    detail: Mapping[str, Any], observe: Callable[[str], tuple[str | None, Any]]
) -> list[dict[str, Any]]:
    """Each dispatched attempt, the newest ``ATTEMPTS_FETCHED_MAX`` with the worker's report
    (value, error, output) and its ``fetch`` record when the worker's document has one."""
    attempts = dispatched_attempts(detail)
    fetched_from = max(0, len(attempts) - ATTEMPTS_FETCHED_MAX)
    for i, entry in enumerate(attempts):
        eid = f"s{detail.get('schedule_id')}-o{detail.get('id')}-a{entry['attempt']}"
        entry.update(execution_id=eid, report=None, egress=None, report_unavailable=None)
        if i < fetched_from:
            entry["report_unavailable"] = "an older attempt: its report is not fetched here"
            continue
        try:
            status, document = observe(eid)
        except Exception as exc:  # the page still answers
            status, document = None, type(exc).__name__
        if status is None or not isinstance(document, Mapping):
            entry["report_unavailable"] = f"the worker did not return it: {str(document)[:200]}"
            continue
        report = attempt_report(document)
        entry["report"] = report
        entry["egress"] = egress_view(report.get("egress", document.get("egress")))
    return attempts


EGRESS_COLUMNS: Final = (
    "n", "method", "url", "decision", "reason", "credentials", "status", "error",
    "request_bytes", "response_bytes", "ms",
)  # fmt: skip


def egress_view(value: Any) -> dict[str, Any] | None:
    """The attempt's ``fetch`` record (the worker's ``egress`` report: ``{"requests": [...],
    "over_limit", "records_dropped"}``) as table rows; None when the report has none."""
    if isinstance(value, list):
        value = {"requests": value}
    if not isinstance(value, Mapping) or not isinstance(value.get("requests"), list):
        return None
    rows = [
        [_cell(item.get(column)) for column in EGRESS_COLUMNS]
        for item in value["requests"]
        if isinstance(item, Mapping)
    ]
    return {
        "columns": EGRESS_COLUMNS,
        "rows": rows,
        "over_limit": value.get("over_limit") or 0,
        "records_dropped": value.get("records_dropped") or 0,
    }


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


class Occurrence(_Page):
    def on_get(self, req: falcon.Request, resp: falcon.Response, occurrence_id: int) -> None:
        detail = self.parts.view.read(lambda st: occurrence_view(st, occurrence_id))
        if detail is None:
            raise falcon.HTTPNotFound(
                title="no_such_occurrence", description=f"no retained occurrence {occurrence_id}"
            )
        paused = self.parts.view.read(lambda st: st.extra.get("paused"))
        max_retries = self.parts.view.read(
            lambda st: _max_retries(st.schedules.get(detail["schedule_id"]))
        )
        _html(
            resp,
            self.render(
                req,
                "occurrence.html",
                title=f"occurrence {occurrence_id}",
                o={**detail, "note": retry_note(detail, max_retries, detail.get("not_before_at"))},
                attempts=attempts_with_reports(detail, self.parts.view.observe),
                events_url=f"/events?occurrence={occurrence_id}",
                paused_since=None if paused is None else paused["at"],
                live_keys={"occurrence-id": occurrence_id},
            ),
        )


def _max_retries(schedule: Any) -> int | None:
    return None if schedule is None else schedule.definition.policy.retry.max_retries


def login_page(renderer: Renderer, req: falcon.Request, error: str | None, nonce: str = "") -> str:
    return renderer.page(
        "login.html", title="log in", session_nav=False, error=error, nonce=nonce, page="login"
    )


class Login:
    public = True
    body_bytes_max = FORM_BYTES_MAX

    def __init__(self, parts: ConsoleParts, renderer: Renderer) -> None:
        self.parts = parts
        self.renderer = renderer

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        nonce = req.get_param("nonce") or ""  # shown in a form; exchanged only by POST
        if len(nonce) > 128:
            nonce = ""
        _html(resp, login_page(self.renderer, req, None, nonce))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        if not same_origin(req, required=False):
            raise falcon.HTTPForbidden(title="origin_refused", description="a foreign Origin")
        try:
            form = console_actions.parse_form(read_body(req))
        except Refused as refused:
            _html(resp, login_page(self.renderer, req, refused.message), 400)
            return
        now_s = self.parts.clock()
        token, nonce = form.get("token"), form.get("nonce")
        if token:
            accepted = self.parts.credentials.role_of(token) == "console"
        elif nonce:
            accepted = self.parts.sessions.redeem_nonce(nonce, now_s)
        else:
            accepted = False
        if not accepted:
            log.info("console: a login was refused")  # never the token or the nonce
            message = (
                "That link was already used or has expired: start the quickstart again or log in "
                "with the token."
                if nonce and not token
                else "That is not the console's token."
            )
            _html(resp, login_page(self.renderer, req, message), 401)
            return
        _session, cookie = self.parts.sessions.open(now_s)
        log.info("console: a session was opened")
        resp.set_cookie(
            COOKIE_NAME,
            cookie,
            max_age=self.parts.sessions.ttl_s,
            path="/",
            secure=self.parts.tls,
            http_only=True,
            same_site="Strict",
        )
        resp.status = falcon.HTTP_303
        resp.location = "/"


class Logout:
    body_bytes_max = FORM_BYTES_MAX

    def __init__(self, parts: ConsoleParts) -> None:
        self.parts = parts

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        identity: Identity = req.context.identity
        form = console_actions.parse_form(read_body(req))
        if identity.session is not None:
            check_browser_write(req, identity, self.parts.sessions, form)
            self.parts.sessions.close(identity.session.id)
            self.parts.pusher.end_session(identity.session.id)
        resp.unset_cookie(COOKIE_NAME, path="/")
        resp.status = falcon.HTTP_303
        resp.location = "/login"


def own_origin(req: falcon.Request) -> str:
    scheme = "https" if getattr(req.context, "tls", False) else "http"
    return f"{scheme}://{req.get_header('Host') or ''}"


def same_origin(req: falcon.Request, *, required: bool) -> bool:
    """The request comes from one of the console's own pages.

    ``Origin`` equal to the console's own proves it. Under ``Referrer-Policy: no-referrer`` a
    browser sends ``Origin: null`` for a form it posts, so for ``null`` (or no ``Origin``) the
    Fetch Metadata header decides: ``Sec-Fetch-Site: same-origin`` is set by the browser itself
    (no page can forge it), and anything else — ``cross-site``, ``same-site``, absent — is
    refused when ``required``.
    """
    origin = req.get_header("Origin")
    if origin is not None and origin != "null":
        return origin == own_origin(req)
    if req.get_header("Sec-Fetch-Site") == "same-origin":
        return True
    return origin is None and not required


def check_browser_write(
    req: falcon.Request, identity: Identity, sessions: SessionBook, form: Mapping[str, str]
) -> None:
    """A cookie session's write carries its CSRF token and the console's own ``Origin``; a
    script's bearer cannot be sent by a browser on another page's behalf, but a foreign
    ``Origin`` is refused for it too."""
    if identity.session is None:
        if not same_origin(req, required=False):
            raise falcon.HTTPForbidden(title="origin_refused", description="a foreign Origin")
        return
    if not same_origin(req, required=True):
        raise falcon.HTTPForbidden(
            title="origin_refused", description="a write needs the console's own Origin header"
        )
    if not sessions.csrf_ok(identity.session, form.get("csrf")):
        raise falcon.HTTPForbidden(title="csrf_refused", description="csrf: missing or wrong")


class Confirm(_Page):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        action = req.get_param("action") or ""
        if action not in console_actions.CONSOLE_ACTIONS:
            raise falcon.HTTPBadRequest(
                title="not_a_console_action",
                description=f"action: must be one of {', '.join(console_actions.CONSOLE_ACTIONS)}",
            )
        field_name = console_actions.ACTION_FIELD[action]
        target = _page_int(req, field_name, 0) if field_name else None
        if field_name and not target:
            raise falcon.HTTPBadRequest(
                title="invalid_query", description=f"{field_name}: required"
            )
        label = None
        if field_name == "id":
            schedule = self.parts.view.read(lambda st: st.schedules.get(target))
            label = None if schedule is None else schedule.definition.name
        asked = console_actions.prompt(action, target, label)
        _html(
            resp,
            self.render(
                req,
                "confirm.html",
                title="confirm",
                question=asked.question,
                verb=asked.verb,
                action=action,
                fields=asked.fields,
                back=asked.back,
                events_url=None,
            ),
        )


class Actions(_Page):
    body_bytes_max = FORM_BYTES_MAX

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        identity: Identity = req.context.identity
        gateway = self.parts.gateway
        if gateway is None:
            raise falcon.HTTPNotFound()
        form = console_actions.parse_form(read_body(req))
        check_browser_write(req, identity, self.parts.sessions, form)
        if form.get("confirmed") != "yes":
            raise falcon.HTTPBadRequest(
                title="confirmation_required", description="confirmed: must be yes"
            )
        try:
            command = console_actions.command_of(form, self.parts.view.limits())
        except Refused as refused:
            page = self._result(req, "refused", "Refused: nothing changed", refused.message, "/")
            _html(resp, page, refused.status)
            return
        action = command["action"]
        log.info("console: %s sent (operator role)", action)
        outcome = console_actions.execute(gateway, command, self.parts.reply_timeout_s)
        said = console_actions.verdict(action, outcome)
        back = console_actions.prompt(action, _target(command), None).back
        result = outcome.body.get("result") if outcome.ok else None
        detail = json.dumps(result, indent=2, sort_keys=True) if result else None
        page = self._result(req, said.kind, said.heading, said.message, back, detail)
        _html(resp, page, outcome.status)

    def _result(
        self, req: falcon.Request, kind: str, heading: str, message: str, back: str,
        detail: str | None = None,
    ) -> str:  # fmt: skip
        return self.render(
            req, "result.html", title=heading, kind=kind, heading=heading, message=message,
            back=back, detail=detail, events_url=None,
        )  # fmt: skip


def _target(command: Mapping[str, Any]) -> int | None:
    return command.get("id") or command.get("occurrence_id")


class Events:
    """``GET /events``: the first bytes here, the rest from the pusher (appliance/console/
    pusher.py). 503 when ``streams_max`` streams are open. It resumes after the id in
    ``Last-Event-ID`` (a reconnecting browser) or else in ``?after=`` (a page's first stream:
    the id the page was rendered at); without either it starts from now."""

    def __init__(self, parts: ConsoleParts) -> None:
        self.parts = parts

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        identity: Identity = req.context.identity
        follow = _page_int(req, "occurrence", 0) or None
        after = _resume_after(req)
        offer = req.env.get(TAKEOVER_KEY)
        if offer is None:
            raise falcon.HTTPServiceUnavailable(title="no_streams", description="not served here")
        if follow is not None and not self.parts.source.follow(follow):
            raise falcon.HTTPServiceUnavailable(
                title="too_many_followed", description="too many occurrences are followed now"
            )
        session_id = identity.session.id if identity.session else None
        stream = self.parts.pusher.reserve(session_id, follow)
        if stream is None:
            if follow is not None:
                self.parts.source.unfollow(follow)
            raise falcon.HTTPServiceUnavailable(
                title="too_many_streams",
                description=f"at most {self.parts.pusher.streams_max} event streams are open",
                headers={"Retry-After": "5"},
            )
        # Reserved first, then read: what is published from here on either is in these first
        # bytes or reaches the stream after them (the pusher leaves out what they carry).
        missed, through = self.parts.hub.opening(after, follow)
        stream.replayed_through = through
        first = [f"retry: {EVENT_RETRY_MS}\n\n".encode()]
        if missed is None:
            first.append(sse_message("reset", {"reason": "missed events"}))
        else:
            first.extend(missed)
        # With its id: a browser that reconnects resumes from here (Last-Event-ID).
        first.append(sse_message("hello", {"last_id": through}, through))
        offer(stream)
        resp.status = falcon.HTTP_200
        resp.content_type = "text/event-stream; charset=utf-8"
        resp.set_header("Cache-Control", "no-store")
        resp.set_header("X-Accel-Buffering", "no")
        resp.stream = iter([b"".join(first)])  # no length: waitress answers it chunked


EVENT_ID_DIGITS_MAX: Final = 15


def _event_id(text: str) -> int | None:
    ok = text.isascii() and text.isdigit() and len(text) <= EVENT_ID_DIGITS_MAX
    return int(text) if ok else None


def _resume_after(req: falcon.Request) -> int | None:
    last_id = req.get_header("Last-Event-ID")
    if last_id is not None:
        # A browser echoes the last id it saw; anything else is ignored (it starts from now).
        return _event_id(last_id)
    text = req.get_param("after")
    if text is None:
        return None
    after = _event_id(text)
    if after is None:
        raise falcon.HTTPBadRequest(
            title="invalid_query",
            description=f"after: an event id (at most {EVENT_ID_DIGITS_MAX} digits)",
        )
    return after


class Static:
    public = True

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        content_type = STATIC_FILES.get(name)
        if content_type is None:
            raise falcon.HTTPNotFound()
        resp.data = resources.files("appliance.console").joinpath("static", name).read_bytes()
        resp.content_type = content_type
        resp.set_header("Cache-Control", "max-age=300")


def _error_serializer(renderer: Renderer) -> Callable[..., None]:
    def serialize(req: falcon.Request, resp: falcon.Response, exc: falcon.HTTPError) -> None:
        code = str(exc.title or "error")
        message = str(exc.description or exc.title or "error")
        if req.client_accepts("text/html") and req.path != "/events":
            resp.content_type = "text/html; charset=utf-8"
            resp.text = renderer.page(
                "error.html",
                title=code,
                heading=f"{exc.status_code} {code}",
                message=message,
                session_nav=getattr(req.context, "identity", None) is not None,
            )
        else:
            resp.content_type = falcon.MEDIA_JSON
            resp.data = error_body(code, message)

    return serialize


def create_console_app(parts: ConsoleParts) -> ApplianceApp:
    renderer = Renderer(parts.node_id)

    def unauthenticated(req: falcon.Request, resp: falcon.Response) -> None:
        if req.path == "/events" or not req.client_accepts("text/html"):
            resp.status = falcon.HTTP_401
            resp.content_type = falcon.MEDIA_JSON
            resp.data = error_body("unauthorized", "log in, or send the console's bearer")
            resp.set_header("WWW-Authenticate", "Bearer")
        else:
            _html(resp, login_page(renderer, req, "Log in to see this page."), 401)

    guard = ConsoleGuard(
        parts.credentials, parts.sessions, parts.clock, unauthenticated, tls=parts.tls
    )
    app = ApplianceApp(middleware=[guard, BodyCap(FORM_BYTES_MAX), NewsMark(parts.hub)])
    app.bearer_gate = ConsoleGate(parts.credentials, parts.sessions, parts.clock)  # type: ignore[assignment]
    app.req_options.auto_parse_form_urlencoded = False
    app.req_options.strip_url_path_trailing_slash = False
    app.resp_options.secure_cookies_by_default = parts.tls
    app.set_error_serializer(_error_serializer(renderer))
    app.add_route("/", Overview(parts, renderer))
    app.add_route("/login", Login(parts, renderer))
    app.add_route("/logout", Logout(parts))
    app.add_route("/schedules", Schedules(parts, renderer))
    app.add_route("/schedules/{schedule_id:int(min=1)}", Schedule(parts, renderer))
    app.add_route("/occurrences/{occurrence_id:int(min=1)}", Occurrence(parts, renderer))
    app.add_route("/events", Events(parts))
    app.add_route("/static/{name}", Static())
    if parts.gateway is not None:
        app.add_route("/confirm", Confirm(parts, renderer))
        app.add_route("/actions", Actions(parts, renderer))
    return app
