"""Writing a laid-out cluster into a directory: never over anything, secrets private from birth.

The directory must be absent or empty: a second ``cluster init`` into the same place would
replace credentials that running processes and existing stores still use. The env file is
created with mode 0600 in the ``open`` call itself (``O_EXCL``), so there is no moment at which
the secrets are readable by others; configs name variables only and stay world-readable. TLS
material goes into ``tls/`` (0700): private keys 0600 from creation, certificates 0644.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from appliance.cluster_init import pki
from appliance.cluster_init.layout import TLS_DIR, ClusterFiles
from appliance.cluster_init.readme import ENV_FILE, WORKER_FILE, render_readme
from appliance.config.loopback import LOOPBACK, MANAGEMENT_ADDR_ENV, env_line

README_FILE = "README.md"
ENV_FILE_MODE = 0o600
CONFIG_FILE_MODE = 0o644
TLS_DIR_MODE = 0o700  # private keys inside (each 0600 as well)


class OutputNotEmpty(Exception):
    """The output directory exists and holds something (or is not a directory)."""


def check_output_dir(out_dir: Path) -> None:
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise OutputNotEmpty(f"{out_dir} exists and is not a directory")
    if any(out_dir.iterdir()):
        raise OutputNotEmpty(
            f"{out_dir} is not empty; cluster init never overwrites (choose a new directory)"
        )


def _create(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)  # the umask may have removed bits we meant to keep (0644)


def _json_text(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


def env_file_text(credentials: dict[str, str], management_addrs: list[str]) -> str:
    lines = [
        "# Credentials of this cluster, one per role, and every voter's management listener.",
        "# Keep private (mode 0600). Load into a shell with:  . ./cluster.env",
    ]
    # token_urlsafe values are [A-Za-z0-9_-]: safe unquoted in every POSIX shell.
    lines += [env_line(name, value) for name, value in credentials.items()]
    # `appliance admin` sends each command to the owner among these (no --addr needed).
    lines.append(env_line(MANAGEMENT_ADDR_ENV, ",".join(management_addrs)))
    return "\n".join(lines) + "\n"


def management_addrs(files: ClusterFiles) -> list[str]:
    return [f"{LOOPBACK}:{voter.management_port}" for voter in files.plan.voters]


def write_cluster(files: ClusterFiles, out_dir: Path) -> list[Path]:
    """Create ``out_dir`` (if needed) and every file in it; the paths written, in order."""
    check_output_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def put(name: str, text: str, mode: int) -> None:
        path = out_dir / name
        _create(path, text, mode)
        written.append(path)

    put(ENV_FILE, env_file_text(files.credentials, management_addrs(files)), ENV_FILE_MODE)
    for name, document in files.runner_configs.items():
        put(name, _json_text(document), CONFIG_FILE_MODE)
    for name, document in (files.worker_configs or {WORKER_FILE: files.worker_config}).items():
        put(name, _json_text(document), CONFIG_FILE_MODE)
    if files.tls_files:
        tls_dir = out_dir / TLS_DIR
        tls_dir.mkdir(mode=TLS_DIR_MODE)
        os.chmod(tls_dir, TLS_DIR_MODE)
        for name, (data, mode) in files.tls_files.items():
            write = pki.write_private if mode == pki.KEY_MODE else pki.write_public
            write(tls_dir / name, data)
            written.append(tls_dir / name)
    put(README_FILE, render_readme(files, out_dir), CONFIG_FILE_MODE)
    return written
