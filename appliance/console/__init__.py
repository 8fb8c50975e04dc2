"""The web console (issue 34): every schedule, run, output and the state of the cluster, live.

A separate, loopback-only listener with its own credential (SPEC §12 "The console is not
management": the management listener keeps "no browser flow"). Modules, one job each:
``sessions`` (signed expiring cookies, CSRF tokens, login nonces), ``guard`` (who may ask what,
security headers), ``views`` (pages from the replicated state, pure), ``chart`` (the run chart
as SVG geometry), ``render`` (Jinja2, autoescaped), ``app`` (the routes), ``actions`` (the six
operator commands a button may send), ``feed`` (the live source and the event hub),
``pusher`` and ``takeover`` (event streams that hold no server thread), ``service`` (wiring a
voter). docs/console.md is the operator's page.
"""

from appliance.console.service import ConsoleService

__all__ = ["ConsoleService"]
