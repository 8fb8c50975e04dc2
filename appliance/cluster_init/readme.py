"""The README that ``appliance cluster init`` writes next to the configs: how to start and look."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from appliance.cluster_init.layout import ENV_NAMES, ClusterFiles

ENV_FILE = "cluster.env"
WORKER_FILE = "worker.json"


def installed_command() -> str:
    """How to run this installation's ``appliance`` from any shell: a bare ``appliance`` is not
    on PATH after ``pip install -e .`` into a venv. The console script next to the running
    interpreter (``.venv/bin/appliance``) when there is one, else ``python -m appliance`` with
    that interpreter's absolute path."""
    python = Path(sys.executable).absolute()
    script = python.parent / "appliance"
    if script.is_file():
        return shlex.quote(str(script))
    return f"{shlex.quote(str(python))} -m appliance"


def render_readme(files: ClusterFiles, out_dir: Path, program: str | None = None) -> str:
    app = program or installed_command()
    plan = files.plan
    first = plan.voters[0]
    some_voter = next(iter(files.runner_configs.values()))
    expires_at = some_voter["remote"]["expires_at"]
    here = shlex.quote(str(out_dir))
    count = len(plan.voters)
    all_addrs = ",".join(f"127.0.0.1:{v.management_port}" for v in plan.voters)
    title = f"{count} voter{'s' if count > 1 else ''}"
    demo = (
        "The demo schedule runs every minute; its line appears in the owner's decision log as an "
        "`outcome` event (`Succeeded`)."
        if some_voter["schedules"]
        else f"No schedule was written: create one with `{app} admin create FILE`."
    )
    tls = (
        "## TLS\n\n"
        f"`{out_dir / 'tls'}` (mode 0700) holds the cluster CA (`ca.pem`, `ca.key`) and a "
        "certificate and key (0600) per process. The voters speak mutual TLS to each other; the "
        "worker and admission are `https://`. No process reads `ca.key`: keep it for issuing "
        "new certificates (docs/security.md, rotating certificates).\n\n"
        if files.tls_files
        else "## TLS\n\nWritten with `--no-tls`: every link is plain HTTP on loopback.\n\n"
    )
    variables = "\n".join(f"- `{name}`" for name in ENV_NAMES.values())
    voters = "\n".join(
        f"| {v.node_id} | `{v.node_id}.json` | {v.cluster_port} | {v.admission_port} "
        f"| {v.management_port} |"
        for v in plan.voters
    )
    starts = "\n".join(
        f"    cd {here} && . ./{ENV_FILE} && {app} runner {v.node_id}.json" for v in plan.voters
    )
    checks = "\n".join(
        f"    {app} admin config check {v.node_id}.json --check-env" for v in plan.voters
    )
    worker_files = files.worker_configs or {WORKER_FILE: files.worker_config}
    worker_checks = "\n".join(
        f"    {app} admin config check {name} --worker --check-env" for name in worker_files
    )
    worker_starts = "\n".join(
        f"    cd {here} && . ./{ENV_FILE} && {app} worker --config {name}" for name in worker_files
    )
    fleet = len(worker_files) > 1
    workers_text = (
        'The workers form a fleet (`remote.workers`, docs/cluster.md, "A fleet of workers"):\n\n'
        "| worker | config | port | labels |\n|---|---|---|---|\n"
        + "\n".join(
            f"| {w['worker_id']} | `{name}` | {w['listen_addr'].rsplit(':', 1)[1]} "
            f"| zone={chr(ord('a') + j)} |"
            for j, (name, w) in enumerate(worker_files.items())
        )
        + '\n\nA definition with `"placement": {"labels": {"zone": "b"}}` runs only on the '
        "zone-b worker."
        if fleet
        else (
            f"The worker (`{files.worker_config['worker_id']}`, config `{WORKER_FILE}`) listens "
            f"on 127.0.0.1:{plan.worker_port}."
        )
    )
    how_many = f"{len(worker_files)} workers" if fleet else "one worker"
    return f"""# A loopback cluster of {title} and {how_many}

Written by `appliance cluster init`. Every process listens on 127.0.0.1 only.

| voter | config | cluster port | admission port | management port |
|---|---|---|---|---|
{voters}

{workers_text}
Stores live under `{out_dir / "data"}`. The grant (`remote.expires_at`, sealed in the contract)
expires at {expires_at}; after that no occurrence is admitted.

## Credentials

`{ENV_FILE}` (mode 0600) holds six fresh, distinct credentials, one per role (admission,
cluster, worker, operator, recovery, admin):

{variables}

and `APPLIANCE_MANAGEMENT_ADDR={all_addrs}`, every voter's management listener, which
`{app} admin` reads when no `--addr` is given. The configs only name these variables. Keep the
file private; anyone who reads it can operate the cluster. Every process below needs it in its
environment: `. ./{ENV_FILE}` exports them.

{tls}## Check

    cd {here} && . ./{ENV_FILE}
{checks}
{worker_checks}

Every voter must print the same `contract digest`.

## Start

One terminal per process (or a process supervisor). The voters elect a leader once a majority
is up; start each worker in its own terminal:

{starts}
{worker_starts}

`{app}` is this installation's command (a bare `appliance` is on PATH only inside an activated
venv). With the zipapp, use `python appliance.pyz` instead (see docs/packaging.md).

## Look

    cd {here} && . ./{ENV_FILE}
    {app} admin status
    {app} admin list
    {app} admin watch

With every voter's management port in `APPLIANCE_MANAGEMENT_ADDR` (or given with `--addr`,
repeated or comma-separated), `admin` sends each command to the voter that holds ownership; a
voter that does not answers 409 and names the owner it knows. One voter alone:
`{app} admin list --addr 127.0.0.1:{first.management_port}`.

{demo}

## Stop and start again

Ctrl-C (or SIGTERM) stops a process cleanly; starting it again resumes from its store. Do not
edit the sealed parts of the configs (voters, limits, schedules, remote) after the first start:
the stores remember the contract digest and refuse a config that disagrees. To start over, stop
everything and delete `{out_dir / "data"}`.
"""
