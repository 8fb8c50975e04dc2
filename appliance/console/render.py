"""Server-side HTML: Jinja2 with autoescaping on for every template, and the console's filters.

Every value a page shows passes through Jinja's autoescape (names, code, console output, error
stacks and fetched content are attacker-controlled); nothing is marked safe except the
``<time>`` element built here from an instant this module formats itself.
"""

from __future__ import annotations

from typing import Any, Final

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from appliance.console.views import rfc3339

TEMPLATES: Final = "templates"


def instant(value: Any) -> Markup:
    """A ``<time>`` for an instant (whole seconds, or RFC 3339 text); UTC until the browser's
    script shows it in the local zone and relative to now."""
    if value is None or value == "":
        return Markup("—")
    text = rfc3339(value) if isinstance(value, int | float) else str(value)
    return Markup('<time datetime="{0}">{0}</time>').format(escape(text))


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("appliance.console", TEMPLATES),
        autoescape=True,  # every template, whatever its name
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["instant"] = instant
    return env


class Renderer:
    """Renders a template with the fields every page has (node, navigation, CSRF, pause)."""

    def __init__(self, node_id: str) -> None:
        self._env = environment()
        self.node_id = node_id

    def page(self, template: str, **fields: Any) -> str:
        base: dict[str, Any] = {
            "node_id": self.node_id,
            "session_nav": True,
            "csrf": None,
            "events_url": None,
            "live_keys": {},
            "paused_since": None,
            "page": template.removesuffix(".html"),
            "title": "console",
        }
        base.update(fields)
        return self._env.get_template(template).render(**base)
