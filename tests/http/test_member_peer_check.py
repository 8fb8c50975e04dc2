"""The cluster listener's peer check admits members added at run time (issue 20): any certificate
from the cluster CA naming exactly one valid node id; the CA chain itself is checked by TLS."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.http.tls import cluster_peer_check, member_of


def cert(*names: str) -> dict[str, Any]:
    return {"subjectAltName": tuple(("DNS", name) for name in names)}


@pytest.mark.parametrize(
    ("certificate", "member"),
    [
        (cert("localhost", "voter-4.voter.appliance"), "voter-4"),
        (cert("v1.voter.appliance"), "v1"),
        (cert("a" * 64 + ".voter.appliance"), "a" * 64),
        (cert("a" * 65 + ".voter.appliance"), None),  # not a node id
        (cert(".voter.appliance"), None),  # an empty id
        (cert("v.1.voter.appliance"), None),  # "." is not in a node id
        (cert("localhost"), None),  # the worker's certificate names no node
        (cert("v1.voter.appliance", "v2.voter.appliance"), None),  # two identities: neither
        (None, None),
        ({}, None),
    ],
)
def test_a_member_certificate_names_exactly_one_node_id(
    certificate: dict[str, Any] | None, member: str | None
) -> None:
    assert member_of(certificate) == member
    assert cluster_peer_check()(certificate) is (member is not None)


def test_a_genesis_list_still_restricts_when_given() -> None:
    check = cluster_peer_check(["v1", "v2"])
    assert check(cert("v1.voter.appliance"))
    assert not check(cert("v4.voter.appliance"))
