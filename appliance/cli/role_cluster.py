"""``appliance cluster init --voters N --out DIR [--base-port P]``: write a loopback cluster;
``appliance cluster init --join DIR --node-id ID``: write the config (and, with TLS, the
certificate) of a node that joins DIR's running cluster (appliance/cluster_init/joiner.py).

Exit codes: 0 written; 1 the files could not be written (I/O); 2 invalid input, including an
output directory that is not empty (nothing is written then). Credentials are never printed.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_INVALID = 2


def run_join(args: argparse.Namespace) -> int:
    from appliance.cluster_init.joiner import plan_joiner, write_joiner
    from appliance.cluster_init.layout import InvalidLayout
    from appliance.cluster_init.readme import ENV_FILE, installed_command

    cluster_dir = Path(args.join).expanduser().absolute()
    if args.node_id is None:
        print("appliance cluster init: --join needs --node-id ID (the new node)", file=sys.stderr)
        return EXIT_INVALID
    try:
        files = plan_joiner(
            cluster_dir,
            args.node_id,
            cluster_port=args.cluster_port,
            admission_port=args.admission_port,
            management_port=args.management_port,
        )
        written = write_joiner(files, cluster_dir)
    except InvalidLayout as err:
        print(f"appliance cluster init: {err}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as err:
        print(f"appliance cluster init: cannot write into {cluster_dir}: {err}", file=sys.stderr)
        return EXIT_FAILURE
    app = installed_command()
    addrs = " ".join(f"--addr {a}" for a in files.management_addrs)
    admission = files.config["admission_addr"]
    scheme = "https" if files.tls_files else "http"
    # Every command loads the cluster's env file first (the admin credential among them), so
    # each works as printed from any shell.
    env = f"cd {shlex.quote(str(cluster_dir))} && . ./{ENV_FILE} &&"
    print(f"wrote the config of {files.node_id}, joining the cluster in {cluster_dir}:")
    for path in written:
        print(f"  {path.relative_to(cluster_dir)}")
    print(
        "next (docs/cluster.md, section 7):\n"
        f"  1. start it:  {env} {app} runner {files.config_name}\n"
        f"  2. add it:    {env} {app} admin add-voter {files.node_id} {files.cluster_addr} "
        f"{addrs}\n"
        f"  3. promote:   {env} {app} admin promote-voter {files.node_id} --wait-s 60 {addrs}\n"
        f"  and add {scheme}://{admission} to the worker's admission_urls, then send the worker "
        "SIGHUP (it reloads that list only), so it can ask this node for permits once it leads"
    )
    if not files.admin_credential:
        print(
            f"note: this cluster's configs name no management.admin_bearer_env (written before "
            f"the admin credential was generated): steps 2 and 3 need it in every voter's "
            f"config and {ENV_FILE} (docs/cluster.md, section 7)"
        )
    return EXIT_OK


def run_init(args: argparse.Namespace) -> int:
    from appliance.cluster_init.layout import InvalidLayout, lay_out

    if args.join is not None:
        if args.out is not None:
            print("appliance cluster init: give either --out or --join", file=sys.stderr)
            return EXIT_INVALID
        return run_join(args)
    if args.out is None:
        print("appliance cluster init: --out DIR is required (or --join DIR)", file=sys.stderr)
        return EXIT_INVALID
    from appliance.cluster_init.writer import OutputNotEmpty, check_output_dir, write_cluster

    out_dir = Path(args.out).expanduser().absolute()
    try:
        check_output_dir(out_dir)
        files = lay_out(
            args.voters,
            args.base_port,
            out_dir,
            datetime.now(UTC),
            demo=not args.no_demo,
            tls=not args.no_tls,
            workers=args.workers,
        )
        written = write_cluster(files, out_dir)
    except (InvalidLayout, OutputNotEmpty) as err:
        print(f"appliance cluster init: {err}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as err:
        print(f"appliance cluster init: cannot write {out_dir}: {err}", file=sys.stderr)
        return EXIT_FAILURE
    kind = "TLS" if files.tls_files else "plain-HTTP"
    fleet = f" with {files.plan.workers} workers" if files.plan.workers > 1 else ""
    print(f"wrote a {len(files.plan.voters)}-voter loopback {kind} cluster{fleet} into {out_dir}:")
    for path in written:
        print(f"  {path.relative_to(out_dir)}")
    print(f"next: read {out_dir / 'README.md'} (start commands), or docs/cluster.md")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    from appliance.cluster_init.layout import (
        BASE_PORT_DEFAULT,
        VOTERS_DEFAULT,
        WORKERS_DEFAULT,
        WORKERS_MAX,
    )

    cluster = subparsers.add_parser("cluster", help="cluster tooling (init)")
    tools = cluster.add_subparsers(dest="cluster_command", metavar="ACTION")
    tools.required = True
    init = tools.add_parser(
        "init",
        help="write a ready-to-run loopback cluster: configs, credentials, start commands",
        description="Write runner configs (one per voter), a worker config, an env file with "
        "fresh distinct credentials (mode 0600) and a README with the start commands into DIR, "
        "which must be absent or empty.",
    )
    init.add_argument(
        "--voters",
        type=int,
        default=VOTERS_DEFAULT,
        metavar="N",
        help=f"number of voters: 1, 3, 5, 7 or 9 (default {VOTERS_DEFAULT})",
    )
    init.add_argument(
        "--workers",
        type=int,
        default=WORKERS_DEFAULT,
        metavar="N",
        help=f"number of workers, 1-{WORKERS_MAX} (default {WORKERS_DEFAULT}); more than one is "
        "a fleet (remote.workers), one config each, labelled zone a, b, c …",
    )
    init.add_argument("--out", metavar="DIR", help="absent or empty directory")
    init.add_argument(
        "--base-port",
        type=int,
        default=BASE_PORT_DEFAULT,
        metavar="N",
        help=f"first of the 31 loopback ports used (default {BASE_PORT_DEFAULT})",
    )
    init.add_argument(
        "--no-demo", action="store_true", help="no initial demo schedule (it runs every minute)"
    )
    init.add_argument(
        "--no-tls",
        action="store_true",
        help="plain HTTP on loopback (default: a cluster CA, node certificates, mutual TLS "
        "between voters and https to the worker and admission)",
    )
    init.add_argument(
        "--join",
        metavar="DIR",
        help="instead: write into DIR (a cluster init directory) the config of a new node that "
        "joins its running cluster (with TLS, also its certificate from DIR/tls/ca.key)",
    )
    init.add_argument("--node-id", metavar="ID", help="with --join: the new node's id")
    for kind in ("cluster", "admission", "management"):
        init.add_argument(
            f"--{kind}-port",
            type=int,
            metavar="N",
            help=f"with --join: its {kind} port (default: the next free slot of the port plan)",
        )
    init.set_defaults(func=run_init)
