"""The runner config with the contract in force: the genesis remote and limits with every
committed amendment applied (appliance/owner/contract_state.py), never what a config file says.

Rebuilt only when the committed amendment part changes; read by every part of the owner.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from appliance.config.runner import RunnerConfig
from appliance.core import state as core
from appliance.owner import contract_state
from appliance.owner.serial import StateReader


class ConfigInForce:
    def __init__(self, genesis: RunnerConfig, state: StateReader) -> None:
        self.genesis = genesis  # the genesis contract's remote and limits; amendments fold over it
        self._read = state.read
        self._cached: tuple[Any, RunnerConfig] = (None, genesis)

    def get(self) -> RunnerConfig:
        key = self._read(lambda st: (core.amendment_index(st), st.limits))
        cached_key, cached = self._cached
        if cached_key != key:
            genesis = self.genesis
            remote = self._read(lambda st: contract_state.remote_in_force(genesis.remote, st))
            cached = replace(genesis, remote=remote, limits=key[1])
            self._cached = (key, cached)
        return cached
