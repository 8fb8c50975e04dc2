"""The operator guide says only what the product does: commands parse, links resolve, configs load.

Every `appliance …` line in a code block of docs/ is parsed by the real argument parser; every
relative link names an existing file (and heading); every JSON config example is accepted by the
validator of its kind, unless it is marked as an example of a refusal, which must then be refused.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import re
from typing import Any

import pytest

from appliance.cli.main import build_parser, main
from appliance.commands.table import ADMIN_ACTIONS
from appliance.config.addresses import is_loopback_host, parse_host_port
from appliance.config.runner import parse_runner_config
from appliance.config.worker import parse_worker_config
from appliance.core.definition import parse_definition
from appliance.core.errors import CoreError, InvalidConfig
from appliance.core.limits import Limits, parse_limits
from appliance.management.commands import Refused, check_command

from . import doccheck

ALL_COMMANDS = [command for page in doccheck.pages() for command in doccheck.commands(page)]
ALL_LINKS = [link for page in doccheck.pages() for link in doccheck.links(page)]
ALL_JSON = [item for page in doccheck.pages() for item in doccheck.json_examples(page)]

# A complete, valid runner config, used to check fragments such as a lone "management" object.
BASE_RUNNER: dict[str, Any] = {
    "node_id": "n1",
    "advertise_addr": "127.0.0.1",
    "cluster_port": 7001,
    "peers": [],
    "data_dir": "data/n1",
    "admission_addr": "127.0.0.1:4501",
    "admission_bearer_env": "MCP_SCHEDULER_ADMISSION_TOKEN",
    "cluster_bearer_env": "MCP_SCHEDULER_CLUSTER_TOKEN",
    "remote": {
        "url": "http://127.0.0.1:4701",
        "bearer_env": "MCP_SCHEDULER_WORKER_TOKEN",
        "expires_at": "2030-01-01T00:00:00Z",
        "session": "docs",
        "timeout_seconds": 60,
        "heap_mb": 64,
        "namespace": "docs",
        "worker_id": "worker-1",
    },
}
LIMIT_FIELDS = frozenset({"schedules", "records", "outstanding", "running", "grace_seconds"})


def _id(item: Any) -> str:
    if isinstance(item, doccheck.Command):
        return f"{item.page.relative_to(doccheck.ROOT)}:{item.line}"
    if isinstance(item, doccheck.Link):
        return f"{item.page.relative_to(doccheck.ROOT)}:{item.line}:{item.target}"
    block = item[0]
    return f"{block.page.relative_to(doccheck.ROOT)}:{block.line}"


def parse_failure(words: tuple[str, ...]) -> str | None:
    """None when the real parser accepts the words; otherwise argparse's message."""
    parser = build_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(list(words))
    except SystemExit as exc:
        if exc.code == 0:  # --help / --version
            return None
        return err.getvalue().strip().splitlines()[-1] if err.getvalue() else "refused"
    return None


def validation_kind(document: Any) -> str | None:
    """Which validator a JSON example belongs to (None: not a config example)."""
    if not isinstance(document, dict):
        return None
    keys = set(document)
    if "node_id" in keys:
        return "runner"
    if "admission_urls" in keys:
        return "worker"
    if "action" in keys and "ok" not in keys:  # a reply carries "ok"; a command never does
        return "command"
    if {"code", "cron", "timezone"} <= keys:
        return "definition"
    if keys == {"management"}:
        return "management"
    if keys and keys <= LIMIT_FIELDS:
        return "limits"
    return None


def validate(kind: str, document: Any) -> None:
    """Raise when the validator of `kind` refuses the document."""
    if kind == "runner":
        parse_runner_config(document)
    elif kind == "worker":
        parse_worker_config(document)
    elif kind == "definition":
        parse_definition(document, Limits())
    elif kind == "limits":
        parse_limits(document)
    elif kind == "management":
        runner = copy.deepcopy(BASE_RUNNER)
        runner.update(document)
        parse_runner_config(runner)
    elif kind == "command":
        # The contract amendments need the admin credential; recovery may send everything else.
        amends = document.get("action") in ADMIN_ACTIONS
        check_command(document, "admin" if amends else "recovery", Limits())
    else:
        raise ValueError(f"no validator for {kind}")


REFUSALS = (InvalidConfig, CoreError, Refused, ValueError)
CONFIG_EXAMPLES = [
    (block, document, kind)
    for block, documents in ALL_JSON
    for document in documents
    if (kind := validation_kind(document)) is not None
]


# ---- commands --------------------------------------------------------------------------------


def test_the_guide_quotes_every_role_and_admin_tool() -> None:
    first_words = {" ".join(c.variants[0][:2]) for c in ALL_COMMANDS if c.variants[0]}
    roles = {words.split()[0] for words in first_words}
    assert {"runner", "worker", "quickstart", "cluster", "admin"} <= roles
    tools = ("status", "list", "create", "cancel", "acknowledge-stopped", "store", "config")
    beyond_the_seeds = ("run-now", "enable", "update", "pause", "resume", "backfill")
    for tool in (*tools, *beyond_the_seeds):
        assert f"admin {tool}" in first_words, tool


def test_the_guide_shows_every_command_of_the_table_as_a_checked_example() -> None:
    from appliance.commands.table import COMMANDS

    shown = {
        document["action"]
        for _block, document, kind in CONFIG_EXAMPLES
        if kind == "command" and isinstance(document.get("action"), str)
    }
    assert set(COMMANDS) <= shown, sorted(set(COMMANDS) - shown)


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=_id)
def test_every_command_line_in_the_docs_parses_with_the_real_parser(
    command: doccheck.Command,
) -> None:
    for words in command.variants:
        problem = parse_failure(words)
        assert problem is None, f"{command.text!r} -> {problem}"


def test_a_misspelt_option_is_caught_by_the_command_check() -> None:
    page = doccheck.DOCS / "example.md"
    text = "```sh\nappliance admin status --adress 127.0.0.1:4601\n```\n"
    [command] = doccheck.commands(page, text)
    assert parse_failure(command.variants[0]) is not None


def test_synopsis_lines_are_checked_with_and_without_their_optional_groups() -> None:
    page = doccheck.DOCS / "example.md"
    text = "    appliance admin status [--addr 127.0.0.1:4601] [--bogus]\n"
    [command] = doccheck.commands(page, "para\n\n" + text)
    minimal, full = command.variants
    assert parse_failure(minimal) is None
    assert parse_failure(full) is not None


def test_prompts_prefixes_assignments_and_comments_are_removed() -> None:
    page = doccheck.DOCS / "example.md"
    text = (
        "```console\n"
        "$ cd my-cluster && . ./cluster.env && appliance runner voter-1.json  # first voter\n"
        "$ APPLIANCE_TESTING=1 python -m appliance quickstart --data-dir DIR\n"
        "$ python dist/appliance.pyz admin store check \\\n"
        "    DATA_DIR\n"
        "not a command: appliance\n"
        "```\n"
    )
    found = [command.variants[0] for command in doccheck.commands(page, text)]
    assert found == [
        ("runner", "voter-1.json"),
        ("quickstart", "--data-dir", "1"),
        ("admin", "store", "check", "1"),
    ]


# ---- links -----------------------------------------------------------------------------------


@pytest.mark.parametrize("link", ALL_LINKS, ids=_id)
def test_every_relative_link_resolves_to_a_file_and_heading(link: doccheck.Link) -> None:
    path, anchor = doccheck.resolve(link)
    assert path.exists(), f"{link.target}: no such file {path}"
    if anchor and path.suffix == ".md":
        assert anchor in doccheck.anchors(path), f"{link.target}: no heading #{anchor}"


README = doccheck.ROOT / "README.md"
README_LINKS = doccheck.links(README) if README.exists() else []


@pytest.mark.parametrize("link", README_LINKS, ids=_id)
def test_every_relative_link_of_the_readme_resolves(link: doccheck.Link) -> None:
    path, anchor = doccheck.resolve(link)
    assert path.exists(), f"{link.target}: no such file {path}"
    if anchor and path.suffix == ".md":
        assert anchor in doccheck.anchors(path), f"{link.target}: no heading #{anchor}"


def test_every_page_of_the_guide_is_reachable_from_its_table_of_contents() -> None:
    start = (doccheck.DOCS / "index.md").resolve()
    seen = {start}
    pending = [start]
    while pending:
        page = pending.pop()
        for link in doccheck.links(page):
            path, _ = doccheck.resolve(link)
            path = path.resolve()
            if path.suffix == ".md" and path.exists() and path not in seen:
                seen.add(path)
                pending.append(path)
    unreachable = [str(p.relative_to(doccheck.ROOT)) for p in doccheck.pages() if p not in seen]
    assert unreachable == [], "link these from docs/index.md (or a page it reaches)"


_ROUTE_CONSTANT = re.compile(r"\b\w+_PATH(?::\s*Final)?\s*=\s*\"(/[^\"]*)\"")


def _normalized(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def mounted_paths() -> set[str]:
    """Every route path the code names (``*_PATH = "/..."``), client prefixes excepted."""
    found: set[str] = set()
    for source in (doccheck.ROOT / "appliance").rglob("*.py"):
        for match in _ROUTE_CONSTANT.finditer(source.read_text(encoding="utf-8")):
            if not match.group(1).endswith("/"):
                found.add(_normalized(match.group(1)))
    return found


def test_the_routes_page_lists_every_route_the_code_mounts() -> None:
    text = (doccheck.DOCS / "routes.md").read_text(encoding="utf-8")
    documented = {_normalized(span) for span in re.findall(r"`(?:GET|POST) (/[^`\s]*)`", text)}
    paths = mounted_paths()
    assert {"/scheduler/v1/admit", "/raft/v1/append", "/api/scheduled/v1/exec"} <= paths
    assert sorted(paths - documented) == []


def test_a_broken_link_and_a_wrong_anchor_are_caught() -> None:
    page = doccheck.DOCS / "index.md"
    text = "See [x](no-such-page.md), [y](configuration.md#no-such-heading), [z](https://a.b).\n"
    found = doccheck.links(page, text)
    assert [link.target for link in found] == [
        "no-such-page.md",
        "configuration.md#no-such-heading",
    ]
    missing, _ = doccheck.resolve(found[0])
    assert not missing.exists()
    path, anchor = doccheck.resolve(found[1])
    assert path.exists()
    assert anchor not in doccheck.anchors(path)


def test_links_inside_code_are_not_links() -> None:
    page = doccheck.DOCS / "index.md"
    text = "`[a](nowhere.md)`\n\n```\n[b](nowhere.md)\n```\n"
    assert doccheck.links(page, text) == []


def test_heading_anchors_follow_the_github_rules() -> None:
    assert doccheck.slugify("Runner config") == "runner-config"
    assert doccheck.slugify("`POST /scheduler/v1/admit` (worker → runner)") == (
        "post-schedulerv1admit-worker--runner"
    )


# ---- config examples -------------------------------------------------------------------------


def test_the_guide_shows_every_kind_of_config() -> None:
    kinds = {kind for _, _, kind in CONFIG_EXAMPLES}
    assert {"runner", "worker", "definition", "management", "command"} <= kinds


@pytest.mark.parametrize(
    ("block", "document", "kind"),
    CONFIG_EXAMPLES,
    ids=[f"{_id((b,))}:{k}" for b, _, k in CONFIG_EXAMPLES],
)
def test_every_config_example_is_accepted_unless_marked_as_a_refusal(
    block: doccheck.Block, document: Any, kind: str
) -> None:
    if block.marked_invalid:
        with pytest.raises(REFUSALS):
            validate(kind, document)
    else:
        try:
            validate(kind, document)
        except REFUSALS as exc:
            problems = getattr(exc, "problems", None) or getattr(exc, "message", None) or exc
            pytest.fail(f"{kind} example refused: {problems}")


def test_a_wrong_config_example_is_caught() -> None:
    page = doccheck.DOCS / "example.md"
    text = '```json\n{"management": {"addr": "0.0.0.0:4601", "bearer_env": "OP"}}\n```\n'
    [(_, [document])] = doccheck.json_examples(page, text)
    assert validation_kind(document) == "management"
    with pytest.raises(InvalidConfig):
        validate("management", document)


def test_a_marked_refusal_is_recognised() -> None:
    page = doccheck.DOCS / "example.md"
    text = f'{doccheck.INVALID_MARKER}\n```json\n{{"records": 100}}\n```\n'
    [(block, [document])] = doccheck.json_examples(page, text)
    assert block.marked_invalid
    assert validation_kind(document) == "limits"
    with pytest.raises(REFUSALS):
        validate("limits", document)


def test_command_lines_of_a_jsonl_block_are_checked_one_by_one() -> None:
    page = doccheck.DOCS / "example.md"
    text = '```json\n{"action":"status"}\n{"action":"disable","id":0}\n```\n'
    [(_, documents)] = doccheck.json_examples(page, text)
    validate("command", documents[0])
    with pytest.raises(Refused):
        validate("command", documents[1])


def _addr_values(words: tuple[str, ...]) -> list[str]:
    values = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--addr"]
    return values + [word.split("=", 1)[1] for word in words if word.startswith("--addr=")]


def test_every_admin_address_in_the_docs_is_one_the_admin_tool_accepts() -> None:
    checked = 0
    for command in ALL_COMMANDS:
        for value in _addr_values(command.variants[-1]):
            if value == "1":  # a placeholder (ADDR)
                continue
            host = parse_host_port(value).host
            assert is_loopback_host(host), f"{command.text!r}: --addr {value} is not loopback"
            checked += 1
    assert checked >= 3


def test_a_remote_admin_address_would_be_caught() -> None:
    assert not is_loopback_host(parse_host_port("10.0.0.1:4601").host)
    assert _addr_values(("admin", "status", "--addr", "10.0.0.1:4601")) == ["10.0.0.1:4601"]


OFFLINE_PREFIXES = (("admin", "cron", "next"), ("--version",), ("--help",))
OFFLINE_COMMANDS = [
    command
    for command in ALL_COMMANDS
    if any(command.variants[-1][: len(p)] == p for p in OFFLINE_PREFIXES)
]


def test_the_guide_quotes_offline_commands_that_can_really_run() -> None:
    assert any(c.variants[-1][:3] == ("admin", "cron", "next") for c in OFFLINE_COMMANDS)


@pytest.mark.parametrize("command", OFFLINE_COMMANDS, ids=_id)
def test_every_offline_command_in_the_docs_runs_and_succeeds(command: doccheck.Command) -> None:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(list(command.variants[-1]))
    except SystemExit as exc:  # --help and --version exit through argparse
        code = exc.code
    assert code in (0, None), f"{command.text!r} exited {code}"
    assert out.getvalue().strip(), f"{command.text!r} printed nothing"


def test_the_parser_used_is_the_products_own() -> None:
    assert isinstance(build_parser(), argparse.ArgumentParser)
    assert build_parser().prog == "appliance"
