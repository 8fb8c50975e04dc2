"""``appliance cluster init``: a ready-to-run loopback cluster written into a directory.

``layout`` computes every config and credential (pure), ``writer`` puts them on disk, ``readme``
renders the start commands. See docs/cluster.md.
"""
