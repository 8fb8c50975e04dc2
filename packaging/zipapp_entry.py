"""The ``__main__`` of appliance.pyz: pick the extraction cache, check the interpreter, hand over.

Theory of operation: a .pyz holding native wheels (apsw, cryptography, mini-racer) cannot import
them from inside the zip, so shiv's bootstrap extracts the archive's site-packages once into a
cache directory keyed by the build id and puts it on ``sys.path``. This file runs first and only
decides two things shiv does not:

- *where* that cache lives: ``APPLIANCE_CACHE_DIR``, else ``SHIV_ROOT``, else
  ``$XDG_CACHE_HOME/appliance``, else ``~/.cache/appliance``; the choice is exported as
  ``SHIV_ROOT`` so that shiv (and every child process) agrees. It must be private: code
  extracted there is imported, so a directory other users can write to is refused;
- *whether* this interpreter can load the native parts at all: they were built for one CPython
  minor version and one platform (``BUILT_FOR``, written in at build time), and a mismatch would
  otherwise surface as an obscure ``ImportError`` deep inside a role. We refuse early instead,
  with a message that says how to get a matching build.

The archive is built with shiv's ``extend_pythonpath``: the extracted site-packages is appended to
``PYTHONPATH`` so that children started as ``python -m appliance …`` (the quickstart's worker, the
engine's children) import the same code without knowing about the zipapp.

This file is standalone on purpose (stdlib only, nothing from the archive is importable yet).
"""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
from collections.abc import Mapping

# Replaced by packaging/build_zipapp.py with the target interpreter's description.
BUILT_FOR: dict[str, str] = {}

CACHE_DIR_ENV = "APPLIANCE_CACHE_DIR"
SHIV_ROOT_ENV = "SHIV_ROOT"
EXIT_INCOMPATIBLE = 1


def cache_root(environ: Mapping[str, str], home: str) -> str:
    """The absolute directory under which the archive's site-packages is extracted."""
    for name in (CACHE_DIR_ENV, SHIV_ROOT_ENV):
        chosen = environ.get(name, "")
        if chosen:
            return os.path.abspath(os.path.expanduser(chosen))
    xdg = environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
    base = xdg if os.path.isabs(xdg) else os.path.join(home, ".cache")
    return os.path.join(base, "appliance")


def running_python() -> dict[str, str]:
    return {
        "implementation": sys.implementation.name,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "platform": sysconfig.get_platform(),
    }


def incompatibility(built_for: Mapping[str, str], running: Mapping[str, str]) -> str | None:
    """Why this archive cannot run on ``running``, or None when it can."""
    differences = [
        f"{key} {running.get(key)!r} (built for {built_for[key]!r})"
        for key in ("implementation", "python", "platform")
        if key in built_for and running.get(key) != built_for[key]
    ]
    if not differences:
        return None
    return (
        "this appliance.pyz holds native extensions for another interpreter: "
        + "; ".join(differences)
        + ". Run it with a matching Python, or build one for this interpreter with "
        "`python packaging/build_zipapp.py --python /path/to/python` (see docs/packaging.md)."
    )


def cache_problem(root: str) -> str | None:
    """Why ``root`` cannot hold the extracted code, or None (creating it if needed)."""
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        mode = os.stat(root).st_mode
    except OSError as err:
        return f"cannot create the cache directory {root}: {err.strerror or err}"
    if not os.access(root, os.W_OK | os.X_OK):
        return f"the cache directory {root} is not writable"
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        # Whoever can write there can replace the code this process is about to import.
        return f"the cache directory {root} is writable by other users"
    return None


def main() -> None:
    problem = incompatibility(BUILT_FOR, running_python())
    if problem is not None:
        sys.stderr.write(f"appliance: {problem}\n")
        sys.exit(EXIT_INCOMPATIBLE)
    root = cache_root(os.environ, os.path.expanduser("~"))
    problem = cache_problem(root)
    if problem is not None:
        sys.stderr.write(f"appliance: {problem}; set {CACHE_DIR_ENV} to a private directory\n")
        sys.exit(EXIT_INCOMPATIBLE)
    os.environ[SHIV_ROOT_ENV] = root
    import _bootstrap  # shiv's bootstrap, at the root of the archive

    _bootstrap.bootstrap()


if __name__ == "__main__":
    main()
