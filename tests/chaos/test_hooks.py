"""The testing-only hooks the chaos suite adds to ``appliance runner`` (refused outside tests)."""

from __future__ import annotations

import argparse
import io

import pytest

from appliance.cli.role_runner import peer_route_arg
from appliance.clock import OffsetClock
from appliance.config.addresses import HostPort
from appliance.config.contract import contract_digest
from appliance.runner.process import NetworkOverride, make_clock, run_runner
from tests.runner.harness import config

TESTING = {"APPLIANCE_TESTING": "1"}


class FixedClock:
    time_scale = 20.0

    def now_s(self) -> float:
        return 1_000.0


def test_an_offset_clock_shifts_its_inner_clock_and_keeps_its_scale() -> None:
    clock = OffsetClock(FixedClock(), -37.5)
    assert clock.now_s() == 962.5
    assert clock.time_scale == 20.0


def test_a_clock_offset_is_refused_outside_testing() -> None:
    with pytest.raises(ValueError, match="--clock-offset-seconds is for tests only"):
        make_clock(None, {}, offset_s=5.0)
    with pytest.raises(ValueError, match="for tests only"):
        make_clock(None, {"APPLIANCE_TESTING": "0"}, offset_s=0.0)
    assert isinstance(make_clock(20.0, TESTING, offset_s=5.0), OffsetClock)
    assert not isinstance(make_clock(None, {}), OffsetClock)


def test_runner_exits_2_on_a_testing_hook_without_the_testing_variable() -> None:
    for kwargs in ({"clock_offset_s": 1.0}, {"network": NetworkOverride({})}):
        err = io.StringIO()
        code = run_runner(
            "/nonexistent.json",
            time_scale=None,
            environ={},
            stdin=io.StringIO(),
            stdout=io.StringIO(),
            stderr=err,
            **kwargs,  # type: ignore[arg-type]
        )
        assert code == 2
        assert "for tests only" in err.getvalue()


def test_peer_routes_replace_only_the_named_peer() -> None:
    from appliance.config.runner import parse_runner_config

    base = config()
    doc = {
        "node_id": "v1",
        "advertise_addr": "127.0.0.1",
        "cluster_port": 7001,
        "peers": ["v2@127.0.0.1:7002", "v3@127.0.0.1:7003"],
        "data_dir": "/nonexistent/v1",
        "admission_addr": "127.0.0.1:9",
        "admission_bearer_env": "A",
        "cluster_bearer_env": "C",
        "remote": {
            "url": base.remote.url.url,
            "bearer_env": "W",
            "expires_at": "2099-01-01T00:00:00Z",
            "session": "tests",
            "timeout_seconds": 60,
            "heap_mb": 64,
            "namespace": "ns",
            "worker_id": "w1",
        },
    }
    cfg = parse_runner_config(doc)
    routed = NetworkOverride({"v2": HostPort("127.0.0.1", 9102)}).member_config(cfg)
    assert routed.voters == {
        "v1": HostPort("127.0.0.1", 7001),
        "v2": HostPort("127.0.0.1", 9102),
        "v3": HostPort("127.0.0.1", 7003),
    }
    assert routed.own_addr == cfg.own_addr
    assert NetworkOverride({}).member_config(cfg) == cfg
    with pytest.raises(ValueError, match="names no configured peer"):
        NetworkOverride({"v9": HostPort("127.0.0.1", 1)}).member_config(cfg)
    # Why the process seals the *configured* mapping: the routed one would digest differently
    # and every peer would refuse its messages.
    assert contract_digest(cfg) != contract_digest(routed)


def test_the_peer_route_argument_is_id_equals_host_port() -> None:
    assert peer_route_arg("v2=127.0.0.1:9102") == ("v2", HostPort("127.0.0.1", 9102))
    for bad in ("v2", "=127.0.0.1:1", "v2=127.0.0.1", "v2=127.0.0.1:70000"):
        with pytest.raises(argparse.ArgumentTypeError):
            peer_route_arg(bad)
