"""Operator commands: the one command table, its argument checks and the stdin parser.

Every adapter (stdin, HTTP, MCP, ``appliance admin``, the web console) checks a command against
``table`` and ``args`` before it enters the runner's one queue.
"""
