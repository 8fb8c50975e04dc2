"""The quickstart's data directory: credentials, the two configs, and their loopback ports.

Theory of operation: the first run writes, into the data directory,

- ``credentials.env``: one fresh random token per credential the configs name (admission,
  cluster, worker, operator, recovery, admin, console: all distinct), as ``export NAME=value``
  lines, and
  ``APPLIANCE_MANAGEMENT_ADDR`` (the management listener, kept current when its port moves), so
  ``. ./credentials.env`` is all ``appliance admin`` needs; mode 0600;
- ``runner.json``: one voter (``single`` replication: no peers), its admission route, a loopback
  management listener (operator and recovery credentials), the loopback web console (its own
  credential, read-only), the demo schedule as the initial schedule, and ``remote`` pointing at
  the worker;
- ``worker.json``: the worker's listener and the voter's admission URL.

Later runs reuse these files, because the voter's cluster port, the worker URL (with its port) and
the grant expiry are part of the sealed contract the store was created with: they cannot move
without the store refusing to open. So a sealed port that is taken is a clear error (often: the
quickstart is already running on this data directory). The admission, management and console
ports are per-node settings outside the contract: when one of them is taken, a new free port is
chosen, both configs are rewritten and the change is reported. A credential missing from the file
(for example, a data directory written by an older version) is generated; credentials are not
sealed either.

The documents are built by ``appliance.config.loopback`` (shared with ``appliance cluster init``);
this module owns the data directory: its files, free ports and repairs.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from appliance.config.addresses import AddressError, parse_host_port
from appliance.config.loopback import (
    ENV_NAMES,
    LOOPBACK,
    MANAGEMENT_ADDR_ENV,
    admission_url,
    console_section,
    env_line,
    fresh_token,
    grant_expiry,
    management_section,
    remote_section,
    runner_document,
    worker_document,
)

CREDENTIALS_FILE: Final = "credentials.env"
LEGACY_CREDENTIALS_FILE: Final = "credentials.json"  # the minimal quickstart's file
RUNNER_FILE: Final = "runner.json"
WORKER_FILE: Final = "worker.json"
LISTEN_BACKLOG: Final = 1
NAMESPACE: Final = "quickstart"
NODE_ID: Final = "quickstart"
SESSION: Final = "quickstart"
WORKER_ID: Final = "worker-1"
DEMO_SCHEDULE: Final = {
    "name": "hello",
    "code": "console.log('hello from the appliance, occurrence ' + scheduled.occurrence_id"
    " + ' due at ' + scheduled.due_time)",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}
_ENV_LINE: Final = re.compile(r"^export ([A-Z_][A-Z0-9_]*)=([\x21-\x7e]+)$")


LEGACY_DATA_DIR: Final = "appliance-quickstart"  # in the working directory, before issue 21


def default_data_dir(cwd: Path, environ: Mapping[str, str]) -> tuple[Path, str]:
    """Where the quickstart keeps its files without ``--data-dir``, and why there.

    A per-user data directory outside any checkout: ``$XDG_DATA_HOME/appliance/quickstart``
    (XDG Base Directory spec: only an absolute ``XDG_DATA_HOME`` counts), else
    ``~/.local/share/appliance/quickstart``. An ``./appliance-quickstart`` left in the working
    directory by an earlier version is still found and used, so its store and credentials
    resume instead of a second, empty quickstart appearing elsewhere.
    """
    legacy = cwd / LEGACY_DATA_DIR
    if legacy.is_dir():
        return legacy, f"found ./{LEGACY_DATA_DIR} from an earlier run; using it"
    xdg = environ.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(
            xdg
        ) / "appliance" / "quickstart", "the per-user data directory ($XDG_DATA_HOME)"
    home = environ.get("HOME") or str(Path.home())
    return Path(home) / ".local" / "share" / "appliance" / "quickstart", (
        "per-user data directory (~/.local/share)"
    )


class QuickstartError(Exception):
    """The data directory cannot be used as is; the message says why and what to do."""


@dataclass(frozen=True)
class Layout:
    """What ``prepare`` found or wrote: paths, credential values and what changed."""

    data_dir: Path
    credentials: dict[str, str]  # variable name -> value (never printed)
    runner: dict[str, Any]
    worker: dict[str, Any]
    fresh: bool  # True when this run wrote the configs
    notes: list[str] = field(default_factory=list)

    @property
    def credentials_path(self) -> Path:
        return self.data_dir / CREDENTIALS_FILE

    @property
    def runner_path(self) -> Path:
        return self.data_dir / RUNNER_FILE

    @property
    def worker_path(self) -> Path:
        return self.data_dir / WORKER_FILE

    @property
    def management_addr(self) -> str:
        return str(self.runner["management"]["addr"])

    @property
    def console_addr(self) -> str | None:
        console = self.runner.get("console")
        return None if not isinstance(console, dict) else str(console["addr"])

    @property
    def operator_env(self) -> str:
        return str(self.runner["management"]["bearer_env"])


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether a listener could bind ``host:port`` now (the same socket options as the server)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)  # with SO_REUSEADDR only listen() reports a conflict
    except OSError:
        return False
    finally:
        sock.close()
    return True


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((LOOPBACK, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with a file that is 0600 from its first byte."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o600)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _write_json(path: Path, document: dict[str, Any]) -> None:
    write_private(path, json.dumps(document, indent=2) + "\n")


def credentials_text(credentials: dict[str, str], management_addr: str | None = None) -> str:
    lines = [
        "# The quickstart's credentials, one per role, and its management listener.",
        "# Private (mode 0600): never share or print. Load all into a shell with:",
        "#   . ./credentials.env",
    ]
    # token_urlsafe values are [A-Za-z0-9_-]: safe unquoted in every POSIX shell.
    lines += [env_line(name, value) for name, value in credentials.items()]
    if management_addr is not None:  # what `appliance admin` reads when no --addr is given
        lines.append(env_line(MANAGEMENT_ADDR_ENV, management_addr))
    return "\n".join(lines) + "\n"


def read_credentials(path: Path) -> dict[str, str]:
    """Parse ``credentials.env``; ``QuickstartError`` names the line (never its value)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _ENV_LINE.match(line)
        if match is None:
            raise QuickstartError(f"{path}:{number}: expected `export NAME=value`")
        values[match.group(1)] = match.group(2)
    return values


def _read_legacy(path: Path) -> dict[str, str]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict):
        return {}
    return {str(k): v for k, v in document.items() if isinstance(v, str) and v}


def _names_in(runner: dict[str, Any], worker: dict[str, Any]) -> list[str]:
    """Every credential variable the two configs name, in a stable order."""
    management = runner.get("management") or {}
    console = runner.get("console") or {}
    names = [
        runner.get("admission_bearer_env"),
        runner.get("cluster_bearer_env"),
        (runner.get("remote") or {}).get("bearer_env"),
        management.get("bearer_env"),
        management.get("recovery_bearer_env"),
        console.get("bearer_env"),
        management.get("admin_bearer_env"),
        worker.get("bearer_env"),
        worker.get("admission_bearer_env"),
    ]
    return list(dict.fromkeys(n for n in names if isinstance(n, str)))


def _new_configs(data_dir: Path, now: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    cluster_port, admission_port, worker_port, management_port, console_port = free_ports(5)
    remote = remote_section(
        worker_port, grant_expiry(now), session=SESSION, namespace=NAMESPACE, worker_id=WORKER_ID
    )
    runner = runner_document(
        node_id=NODE_ID,
        cluster_port=cluster_port,
        peers=[],
        data_dir=data_dir / "runner",
        admission_port=admission_port,
        management_port=management_port,
        schedules=[DEMO_SCHEDULE],
        remote=remote,
    )
    runner["console"] = console_section(console_port)
    worker = worker_document(
        namespace=NAMESPACE,
        worker_id=WORKER_ID,
        data_dir=data_dir / "worker",
        admission_ports=[admission_port],
        worker_port=worker_port,
    )
    return runner, worker


def _load(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise QuickstartError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict):
        raise QuickstartError(f"{path} is not a JSON object")
    return document


def _port_of(text: object, what: str) -> int:
    try:
        return parse_host_port(str(text).removeprefix("http://")).port
    except AddressError as exc:
        raise QuickstartError(f"the {what} address {text!r} is not host:port ({exc})") from None


def _check_sealed_ports(runner: dict[str, Any], worker: dict[str, Any]) -> None:
    sealed = [
        (int(runner.get("cluster_port", 0)), "the voter's cluster port"),
        (_port_of(worker.get("listen_addr"), "worker listen"), "the worker's port"),
    ]
    for port, what in sealed:
        if not port_is_free(port):
            raise QuickstartError(
                f"{LOOPBACK}:{port} ({what}) is in use. Is a quickstart already running on this "
                "data directory? The port is sealed in the store's contract, so it cannot move: "
                "stop whatever holds it and run again, or start afresh with another --data-dir."
            )


def _move_unsealed_ports(runner: dict[str, Any], worker: dict[str, Any]) -> list[str]:
    """Re-pick a taken admission or management port (both outside the contract)."""
    notes: list[str] = []
    admission = _port_of(runner.get("admission_addr"), "admission")
    if not port_is_free(admission):
        new = free_ports(1)[0]
        runner["admission_addr"] = f"{LOOPBACK}:{new}"
        worker["admission_urls"] = [admission_url(new)]
        notes.append(f"admission port {admission} was taken: moved to {new}")
    management = runner.get("management")
    if management is None:  # a data directory from before the management listener
        runner["management"] = management_section(free_ports(1)[0])
        notes.append("added a management listener to runner.json")
    else:
        port = _port_of(management.get("addr"), "management")
        if not port_is_free(port):
            new = free_ports(1)[0]
            management["addr"] = f"{LOOPBACK}:{new}"
            notes.append(f"management port {port} was taken: moved to {new}")
        if "admin_bearer_env" not in management:  # a data directory from before issue 35
            management["admin_bearer_env"] = ENV_NAMES["admin"]
            notes.append("added the admin credential (renew-grant, amend-*) to runner.json")
    console = runner.get("console")
    if console is None:  # a data directory from before the web console (issue 34)
        runner["console"] = console_section(free_ports(1)[0])
        notes.append("added the web console to runner.json")
    else:
        port = _port_of(console.get("addr"), "console")
        if not port_is_free(port):
            new = free_ports(1)[0]
            console["addr"] = f"{LOOPBACK}:{new}"
            notes.append(f"console port {port} was taken: moved to {new}")
    return notes


def _ensure_credentials(data_dir: Path, names: list[str]) -> tuple[dict[str, str], bool]:
    """The values for ``names`` (generated where missing); True when the file must be written."""
    path = data_dir / CREDENTIALS_FILE
    legacy = data_dir / LEGACY_CREDENTIALS_FILE
    known = read_credentials(path) if path.exists() else {}
    if legacy.exists():
        known = {**_read_legacy(legacy), **known}
    credentials: dict[str, str] = {}
    changed = not path.exists()
    for name in names:
        value = known.get(name)
        if value is None or value in credentials.values():
            value = fresh_token()
            changed = True
        credentials[name] = value
    return credentials, changed


def prepare(data_dir: Path, now: datetime) -> Layout:
    """Create (first run) or reuse and repair the data directory; ``QuickstartError`` if unusable.

    ``now`` (an aware datetime) is only used to set the grant expiry of a new configuration.
    """
    if not data_dir.exists():
        # The stores and logs are nobody else's business; an existing directory the user named
        # keeps its mode (it might be their working directory).
        data_dir.mkdir(parents=True, mode=0o700)
        os.chmod(data_dir, 0o700)  # mkdir's mode is filtered by the umask
    runner_path, worker_path = data_dir / RUNNER_FILE, data_dir / WORKER_FILE
    have = (runner_path.exists(), worker_path.exists())
    notes: list[str] = []
    if have == (False, False):
        if (data_dir / "runner").exists():
            raise QuickstartError(
                f"{data_dir} holds a voter store but no {RUNNER_FILE}: its sealed contract cannot "
                "be rebuilt; use another --data-dir"
            )
        runner, worker = _new_configs(data_dir, now)
        fresh = True
    elif have == (True, True):
        runner, worker = _load(runner_path), _load(worker_path)
        _check_sealed_ports(runner, worker)
        notes = _move_unsealed_ports(runner, worker)
        fresh = False
    else:
        missing = RUNNER_FILE if not have[0] else WORKER_FILE
        raise QuickstartError(f"{data_dir} is incomplete: {missing} is missing")
    credentials, credentials_changed = _ensure_credentials(data_dir, _names_in(runner, worker))
    text = credentials_text(credentials, str((runner.get("management") or {}).get("addr")))
    path = data_dir / CREDENTIALS_FILE
    if credentials_changed or not path.exists() or path.read_text(encoding="utf-8") != text:
        write_private(path, text)
        if credentials_changed and not fresh:
            notes.append(f"wrote missing credentials into {CREDENTIALS_FILE}")
    (data_dir / LEGACY_CREDENTIALS_FILE).unlink(missing_ok=True)
    if fresh or notes:
        _write_json(runner_path, runner)
        _write_json(worker_path, worker)
    return Layout(data_dir, credentials, runner, worker, fresh, notes)
