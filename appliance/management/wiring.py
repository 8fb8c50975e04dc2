"""Connecting the management listener to a runner loop (``Runner.operator``): ``ManagementService``.

The listener's bounded queue (64 commands) sits in front of the runner loop's own queue. One
forwarding thread takes management commands in FIFO order and hands each to
``runner.operator(OperatorCommand)``, which enqueues it on THE serialized runner loop and returns
its reply; there is no second dispatcher, retry or cancellation state here (seeds/000). Replies
in the stdin shape (``{"ok": false, "status": 409, ...}``) are mapped by ``replies.run_command``:
409 stays 409, ``accepted: false`` stays a definite non-acceptance, anything else that failed
after admission is reported as uncertain.

The service also builds the voter's observability (``appliance.metrics.voter``): the Prometheus
registry with its scrape-time collector, the peer and worker probes, history and output views.
They read what the runner already exposes and never enter the loop. Event metrics (dispatch
latency, admissions, proposal commit latency) need the runner built with the wrappers of
``appliance.metrics.hooks`` around its log and replication, fed the same ``metrics`` object.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from appliance.config.credentials import RunnerCredentials
from appliance.config.runner import RunnerConfig
from appliance.core.limits import LimitsInForce
from appliance.http.tls import (
    cluster_client_context,
    origin_client_context,
    plain_listener_context,
)
from appliance.management.app import ManagementOptions
from appliance.management.gateway import BoundedCommandQueue, Handler, ThreadedConsumer
from appliance.management.listener import ManagementListener
from appliance.metrics.runner import RunnerMetrics
from appliance.metrics.voter import FleetProbe, VoterObservability
from appliance.metrics.voters import VoterProbe
from appliance.owner.contract_state import remote_in_force


class OperatorRunner(Protocol):
    def operator(self, command: Any) -> dict[str, Any]: ...


ManagementAddrs = Callable[[str], "str | None"]


def runner_handler(
    runner: OperatorRunner,
    voters: Mapping[str, Any] | None = None,
    management_addrs: ManagementAddrs | None = None,
) -> Handler:
    """A gateway handler that runs each command on the runner loop via ``runner.operator``.

    ``voters`` (node id → its advertise address) lets a 409 name the owner's advertise host as
    well as its node id, and ``management_addrs`` (node id → the management listener it reports
    on its Raft status, appliance/replication/voter_capabilities.py) the owner's listener, so
    an operator reaches it directly (or through an SSH forward to that host); commands are never
    forwarded over the cluster port.
    """
    from appliance.commands.operator import OperatorCommand, OperatorError

    def handle(command: dict[str, Any]) -> Mapping[str, Any]:
        args = {key: value for key, value in command.items() if key != "action"}
        try:
            reply = runner.operator(OperatorCommand(command["action"], args))
        except OperatorError as err:
            reply = err.reply()
        return with_leader_host(reply, voters or {}, management_addrs)

    return handle


def with_leader_host(
    reply: Mapping[str, Any],
    voters: Mapping[str, Any],
    management_addrs: ManagementAddrs | None = None,
) -> Mapping[str, Any]:
    """A 409 reply with ``leader_host`` added when its ``leader_hint`` names a known voter, and
    ``owner_management_addr`` when that voter has said where its management listener is."""
    if reply.get("ok") is not False or reply.get("status") != 409:
        return reply
    error = reply.get("error") if isinstance(reply.get("error"), Mapping) else {}
    hint = reply.get("leader_hint") or error.get("leader_hint")
    if not isinstance(hint, str):
        return reply
    added: dict[str, Any] = {"leader_hint": hint}
    address = voters.get(hint)
    if address is not None:
        added["leader_host"] = str(getattr(address, "host", None) or str(address).rsplit(":", 1)[0])
    management = management_addrs(hint) if management_addrs is not None else None
    if management is not None:
        added["owner_management_addr"] = management
    return {**reply, **added}


def _bearer_of(credentials: RunnerCredentials, worker_id: str, remote: Any) -> Any:
    """What ``worker_id`` expects from this voter: its own credential, else the remote's."""
    spec = remote.worker(worker_id)
    if spec is not None and spec.bearer_env is not None:
        value = credentials.workers.get(worker_id) or os.environ.get(spec.bearer_env)
        if value:
            return value
    return credentials.worker


def voter_observability(
    cfg: RunnerConfig,
    credentials: RunnerCredentials,
    runner: Any,
    *,
    metrics: RunnerMetrics | None = None,
    store: Any = None,
) -> VoterObservability:
    """Metrics, health, history and output of ``runner`` (peers probed with the cluster bearer)."""
    peers = {node: addr for node, addr in cfg.voters.items() if node != cfg.node_id}
    return VoterObservability(
        runner,
        metrics=metrics,
        store=store,
        # Even without genesis peers: it follows the configuration in force (add_voter).
        probe=VoterProbe(peers, credentials.cluster, ssl_context=cluster_client_context(cfg.tls)),
        # Every worker of the fleet in force, each with the credential it expects (issue 33).
        worker_probe=FleetProbe(
            lambda: runner.machine.read(lambda st: remote_in_force(cfg.remote, st)),
            lambda worker_id, remote: _bearer_of(credentials, worker_id, remote),
            ssl_context=origin_client_context(cfg.tls),
        ),
    )


class ManagementService:
    """The listener plus its forwarding consumer, for one runner process."""

    def __init__(
        self,
        cfg: RunnerConfig,
        credentials: RunnerCredentials,
        runner: OperatorRunner,
        options: ManagementOptions | None = None,
        *,
        metrics: RunnerMetrics | None = None,
        store: Any = None,
        limits: LimitsInForce | None = None,
        management_addrs: ManagementAddrs | None = None,
    ) -> None:
        if cfg.management is None:
            raise ValueError("the config has no management section")
        self.gateway = BoundedCommandQueue()
        self.consumer = ThreadedConsumer(
            self.gateway, runner_handler(runner, cfg.voters, management_addrs)
        )
        self.observability = voter_observability(
            cfg, credentials, runner, metrics=metrics, store=store
        )
        self.listener = ManagementListener(
            cfg.management.addr,
            self.gateway,
            credentials,
            cfg.limits if limits is None else limits,  # a runner passes the committed ones
            options,
            observability=self.observability,
            ssl_context=plain_listener_context(cfg.tls) if cfg.management.tls else None,
        )

    @property
    def port(self) -> int:
        return self.listener.port

    def start(self) -> ManagementService:
        self.consumer.start()
        try:
            self.listener.start()
        except Exception:
            self.consumer.stop()
            raise
        return self

    def stop(self) -> None:
        self.listener.stop()
        self.consumer.stop()
        self.observability.close()
