from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.etcd.cluster import EtcdCluster, require_etcd


@pytest.fixture(scope="module")
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    require_etcd()
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
