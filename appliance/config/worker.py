"""The worker configuration (SPEC §7): the seeds/001 fields plus listener and engine settings.

Theory of operation: read from the environment variable ``MCP_SCHEDULED_WORKER_CONFIG`` (JSON
text) or, when a path is given, from that file; decoded strictly (duplicate keys refused) and
validated by one rule table that reports every problem with its JSON path. Admission URLs follow
the origin rules of ``appliance.config.urls`` and must be distinct origins (fallback order
matters, and a repeated origin would only repeat a failure). ``engine.heap_mb_max`` and
``engine.timeout_seconds_max`` are optional ceilings: the binding's execution authority decides
the engine limits, and the worker may only lower them (``effective_*`` below), never raise them.
The optional ``egress`` section (appliance/config/egress.py) opens ``fetch()`` to scripts; its
relative file paths are resolved against the config file's directory here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from appliance.config.addresses import HostPort, listen_addr_rule, loopback_addr_rule
from appliance.config.common import (
    DATA_DIR,
    ENV_NAME,
    HEAP_MB_MAX,
    HEAP_MB_MIN,
    IDENT,
    TIMEOUT_SECONDS_MAX,
    decode_json,
    read_json_file,
)
from appliance.config.egress import EGRESS_RULE, EgressSettings, resolve_egress_paths
from appliance.config.tls import TLS_RULE, TlsConfig
from appliance.config.urls import Origin, origin_rule
from appliance.core.errors import InvalidConfig
from appliance.core.schema import INVALID, Custom, Field, Integer, ListOf, Obj, validate

WORKER_CONFIG_ENV: Final = "MCP_SCHEDULED_WORKER_CONFIG"
# Waiting is not working (issue 32): 64 executions awaiting responses fit in 2 children (and a
# warm one); a V8 abort takes down at most this many (docs/engine.md, "Waiting is not working").
EXECUTIONS_PER_CHILD_DEFAULT: Final = 32
EXECUTIONS_PER_CHILD_MAX: Final = 64
WORKER_CONFIG_BYTES_MAX: Final = 1024 * 1024
ADMISSION_URLS_MAX: Final = 16


@dataclass(frozen=True)
class EngineSettings:
    max_concurrent: int = 4
    max_queued: int = 16
    output_limit_bytes: int = 65_536
    heap_mb_max: int | None = None  # ceiling on the binding's heap_mb; None: no ceiling
    timeout_seconds_max: int | None = None  # ceiling on the binding's timeout_seconds
    # Executions one engine child hosts at once, each in its own isolate (docs/engine.md).
    executions_per_child: int = EXECUTIONS_PER_CHILD_DEFAULT

    def effective_heap_mb(self, granted_heap_mb: int) -> int:
        """The heap limit to run with: the grant, lowered to the ceiling if one is set."""
        return (
            granted_heap_mb if self.heap_mb_max is None else min(granted_heap_mb, self.heap_mb_max)
        )

    def effective_timeout_seconds(self, granted_timeout_seconds: int) -> int:
        ceiling = self.timeout_seconds_max
        return granted_timeout_seconds if ceiling is None else min(granted_timeout_seconds, ceiling)


@dataclass(frozen=True)
class WorkerConfig:
    namespace: str
    worker_id: str
    data_dir: str
    bearer_env: str
    admission_bearer_env: str
    admission_urls: tuple[Origin, ...]
    listen_addr: HostPort
    engine: EngineSettings = field(default_factory=EngineSettings)
    metrics_addr: HostPort | None = None
    tls: TlsConfig | None = None  # per node (appliance/config/tls.py)
    egress: EgressSettings | None = None  # None: scripts have no fetch() (config/egress.py)


ENGINE_RULE: Final = Obj(
    fields={
        "max_concurrent": Field(Integer(1, 64), required=False, default=4),
        "max_queued": Field(Integer(0, 1024), required=False, default=16),
        "output_limit_bytes": Field(Integer(1024, 1_048_576), required=False, default=65_536),
        "heap_mb_max": Field(Integer(HEAP_MB_MIN, HEAP_MB_MAX), required=False, default=None),
        "timeout_seconds_max": Field(Integer(1, TIMEOUT_SECONDS_MAX), required=False, default=None),
        "executions_per_child": Field(
            Integer(1, EXECUTIONS_PER_CHILD_MAX),
            required=False,
            default=EXECUTIONS_PER_CHILD_DEFAULT,
        ),
    },
    build=EngineSettings,
)

WORKER_RULE: Final = Obj(
    fields={
        "namespace": Field(IDENT, doc="must equal the runner's remote.namespace"),
        "worker_id": Field(IDENT, doc="must equal the runner's remote.worker_id"),
        "data_dir": Field(DATA_DIR, doc="the worker's own durable store"),
        "bearer_env": Field(ENV_NAME, doc="credential the runner presents to this worker"),
        "admission_bearer_env": Field(ENV_NAME, doc="credential for the runners' admission route"),
        "admission_urls": Field(
            ListOf(
                Custom(origin_rule),
                min_items=1,
                max_items=ADMISSION_URLS_MAX,
                unique=lambda origin: origin,
                unique_says="the same origin as",
            ),
            doc="runner admission origins, tried in order",
        ),
        "listen_addr": Field(Custom(listen_addr_rule), doc="scheduled routes listener"),
        "engine": Field(ENGINE_RULE, required=False, default=EngineSettings()),
        "metrics_addr": Field(Custom(loopback_addr_rule), required=False, default=None),
        "tls": Field(TLS_RULE, required=False, default=None),
        "egress": Field(EGRESS_RULE, required=False, default=None),
    },
    build=WorkerConfig,
)


def parse_worker_config(obj: object) -> WorkerConfig:
    """Validate a decoded worker config; raise InvalidConfig listing every problem."""
    parsed, problems = validate(WORKER_RULE, obj)
    if parsed is INVALID:
        raise InvalidConfig(problems)
    return parsed


def load_worker_config(environ: Mapping[str, str], path: str | Path | None = None) -> WorkerConfig:
    """Load from ``path`` when given, else from ``environ[MCP_SCHEDULED_WORKER_CONFIG]``."""
    if path is not None:
        return _with_egress_paths(
            parse_worker_config(read_json_file(path, WORKER_CONFIG_BYTES_MAX, regular_only=True)),
            path,
        )
    text = environ.get(WORKER_CONFIG_ENV)
    if text is None or not text.strip():
        raise InvalidConfig(
            [(WORKER_CONFIG_ENV, "is not set; put the worker config JSON in it or pass a path")]
        )
    if len(text.encode("utf-8", "surrogatepass")) > WORKER_CONFIG_BYTES_MAX:
        raise InvalidConfig(
            [(WORKER_CONFIG_ENV, f"is larger than {WORKER_CONFIG_BYTES_MAX} bytes")]
        )
    return _with_egress_paths(parse_worker_config(decode_json(text)), None)


def _with_egress_paths(config: WorkerConfig, path: str | Path | None) -> WorkerConfig:
    """The egress section's file paths made absolute against the config file (or refused)."""
    if config.egress is None:
        return config
    return dataclasses.replace(config, egress=resolve_egress_paths(config.egress, path))
