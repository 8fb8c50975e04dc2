"""Shared samples: a valid runner config (one voter of three) and a valid worker config."""

from __future__ import annotations

import copy
from typing import Any

import pytest

SEED_DEFINITION: dict[str, Any] = {
    "name": "example",
    "code": "console.log('scheduled')",
    "cron": "* * * * *",
    "timezone": "UTC",
    "policy": {
        "missed": "Skip",
        "overlap": "Skip",
        "retry": {"max_retries": 0, "delay_seconds": 0},
    },
}

VOTERS = {"n1": ("10.0.0.1", 7001), "n2": ("10.0.0.2", 7002), "n3": ("10.0.0.3", 7003)}


def runner_dict(node_id: str = "n1") -> dict[str, Any]:
    host, port = VOTERS[node_id]
    return {
        "node_id": node_id,
        "advertise_addr": host,
        "cluster_port": port,
        "peers": [f"{other}@{h}:{p}" for other, (h, p) in VOTERS.items() if other != node_id],
        "data_dir": f"/var/lib/appliance/{node_id}",
        "admission_addr": f"{host}:4501",
        "admission_bearer_env": "ADMISSION_TOKEN",
        "cluster_bearer_env": "CLUSTER_TOKEN",
        "limits": {
            "schedules": 64,
            "records": 4096,
            "outstanding": 128,
            "running": 16,
            "grace_seconds": 5,
        },
        "schedules": [copy.deepcopy(SEED_DEFINITION)],
        "remote": {
            "url": "https://worker.example.org",
            "bearer_env": "WORKER_TOKEN",
            "expires_at": "2027-01-31T12:00:00Z",
            "session": "ops-2027-01",
            "timeout_seconds": 60,
            "heap_mb": 128,
            "namespace": "operator-scheduler-1",
            "worker_id": "worker-1",
        },
        "management": {
            "addr": "127.0.0.1:4601",
            "bearer_env": "OPERATOR_TOKEN",
            "recovery_bearer_env": "RECOVERY_TOKEN",
        },
    }


def worker_dict() -> dict[str, Any]:
    return {
        "namespace": "operator-scheduler-1",
        "worker_id": "worker-1",
        "data_dir": "/var/lib/scheduled-worker/admissions",
        "bearer_env": "MCP_SCHEDULER_WORKER_TOKEN",
        "admission_bearer_env": "MCP_SCHEDULER_ADMISSION_TOKEN",
        "admission_urls": ["http://127.0.0.1:4501"],
        "listen_addr": "127.0.0.1:4701",
    }


@pytest.fixture
def runner() -> dict[str, Any]:
    return runner_dict()


@pytest.fixture
def worker() -> dict[str, Any]:
    return worker_dict()
