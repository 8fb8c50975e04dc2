"""What an offline, read-only look at a store found (``StoreFacts``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StoreFacts:
    """Facts about one store file, gathered without changing it.

    ``problems`` lists every checksum or structural failure found (empty when every blob
    verified). ``summary`` holds kind-specific, JSON-ready figures (runner: term, vote, log range,
    applied index, checkpoint parts and bytes; worker: incarnations, invocations, executions).
    ``contract`` is the parsed sealed contract when it verified, else ``None``.
    """

    path: str
    kind: str | None
    schema_version: int | None
    min_reader_version: int | None
    created_by_version: str | None
    contract_digest: str | None
    contract: dict[str, Any] | None
    problems: tuple[str, ...]
    wal_present: bool
    summary: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "schema_version": self.schema_version,
            "min_reader_version": self.min_reader_version,
            "created_by_version": self.created_by_version,
            "contract_digest": self.contract_digest,
            "wal_present": self.wal_present,
            "problems": list(self.problems),
            **self.summary,
        }
