"""Configuration models and their validation (SPEC §3 limits/definitions, §6 runner, §7 worker).

Modules: ``schema`` (the declarative validation layer, pure, also used by the policy core),
``addresses`` and ``urls`` (hosts, socket addresses, origin rules), ``rfc3339`` (grant expiry),
``runner`` / ``worker`` (the config models and loaders), ``credentials`` (resolving named
environment variables, redacted holders, constant-time comparison) and ``contract`` (the sealed
contract and its digest). This package file imports nothing, so the core may import ``schema``
without pulling in file or environment handling.
"""
