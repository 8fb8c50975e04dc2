"""The operator management listener: HTTP and sessionless MCP (SPEC §8; docs/management.md).

Modules, one job each: ``gateway`` (the interface into the runner loop and its bounded queue),
``commands`` (validation and authorization before the queue), ``replies`` (gateway outcome →
safe reply, the error table), ``refusals`` (which definite refusal a loop reply reports),
``app`` (Falcon routes and middleware order), ``mcp_tools`` and ``mcp_endpoint`` (MCP
2026-07-28), ``listener`` (waitress on loopback only), ``wiring`` (connecting a ``Runner``),
``openapi`` (docs/openapi.json).
"""

from appliance.management.app import (
    REQUEST_BYTES_MAX,
    ManagementOptions,
    create_management_app,
)
from appliance.management.gateway import (
    COMMAND_QUEUE_SLOTS,
    BoundedCommandQueue,
    CommandGateway,
    DefinitelyRefused,
    NotOwner,
    QueueFull,
    Submitted,
    ThreadedConsumer,
    Uncertain,
    execute,
)
from appliance.management.listener import ManagementListener, NotLoopback
from appliance.management.wiring import ManagementService, runner_handler

__all__ = [
    "COMMAND_QUEUE_SLOTS",
    "REQUEST_BYTES_MAX",
    "BoundedCommandQueue",
    "CommandGateway",
    "DefinitelyRefused",
    "ManagementListener",
    "ManagementOptions",
    "ManagementService",
    "NotLoopback",
    "NotOwner",
    "QueueFull",
    "Submitted",
    "ThreadedConsumer",
    "Uncertain",
    "create_management_app",
    "execute",
    "runner_handler",
]
