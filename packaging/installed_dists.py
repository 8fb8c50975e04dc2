"""Copy the installed distributions that some requirements need into a staging site-packages.

Usage (with the interpreter whose environment holds them):
    python packaging/installed_dists.py TARGET_DIR REQUIREMENT [REQUIREMENT ...]

Theory of operation: the offline build mode reuses exactly the wheels already installed (and
tested) in an environment instead of asking the registry again. Starting from the requirements,
it walks ``Requires-Dist`` (markers evaluated for this interpreter, extras followed when a
requirement asks for them), then copies every file each distribution's RECORD lists, which is
precisely what pip installed: packages, native libraries, data files and the ``.dist-info``
metadata. Entries outside site-packages (console scripts under ``../../bin``) and byte-code
caches are skipped: the zipapp runs its entry point directly and Python rebuilds caches.

A required distribution that is not installed, or an installed version that does not satisfy the
specifier, stops the build with the full list: a zipapp missing a dependency would only fail
later, on some operator's machine.
"""

from __future__ import annotations

import shutil
import sys
from importlib import metadata
from pathlib import Path, PurePosixPath

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # pip always carries a copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]


class MissingDistributions(Exception):
    """Some required distributions are absent or at a version the requirement excludes."""


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def closure(requirements: list[str]) -> list[metadata.Distribution]:
    """Every installed distribution the requirements need, transitively, sorted by name."""
    found: dict[str, metadata.Distribution] = {}
    extras_seen: dict[str, frozenset[str]] = {}
    problems: list[str] = []
    pending = [(Requirement(text), frozenset[str]()) for text in requirements]
    while pending:
        requirement, parent_extras = pending.pop()
        if not _applies(requirement, parent_extras):
            continue
        name = canonicalize_name(requirement.name)
        extras = frozenset(requirement.extras)
        if name in found and extras <= extras_seen[name]:
            continue
        try:
            dist = metadata.distribution(requirement.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{requirement} is not installed")
            continue
        if requirement.specifier and not requirement.specifier.contains(
            dist.version, prereleases=True
        ):
            problems.append(f"{requirement} is required but {dist.version} is installed")
            continue
        found[name] = dist
        extras_seen[name] = extras_seen.get(name, frozenset()) | extras
        for text in dist.requires or []:
            pending.append((Requirement(text), extras_seen[name]))
    if problems:
        raise MissingDistributions("; ".join(sorted(set(problems))))
    return [found[name] for name in sorted(found)]


def _inside_site_packages(relative: PurePosixPath) -> bool:
    return ".." not in relative.parts and not relative.is_absolute()


def copy_distribution(dist: metadata.Distribution, target: Path) -> int:
    """Copy the files RECORD lists for ``dist`` into ``target``; the number of files copied."""
    if dist.files is None:
        # Without RECORD we cannot know what pip installed: copying nothing would build an
        # archive that fails at import time on someone else's machine.
        raise MissingDistributions(f"{dist.metadata['Name']} has no RECORD; reinstall it with pip")
    copied = 0
    for entry in dist.files:
        relative = PurePosixPath(str(entry))
        if not _inside_site_packages(relative) or "__pycache__" in relative.parts:
            continue
        source = Path(str(dist.locate_file(entry)))
        if not source.is_file():
            continue  # RECORD may name files a post-install step removed
        destination = target.joinpath(*relative.parts)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
        copied += 1
    return copied


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    target = Path(argv[0])
    try:
        dists = closure(argv[1:])
    except MissingDistributions as err:
        print(f"installed_dists: {err}", file=sys.stderr)
        return 1
    target.mkdir(parents=True, exist_ok=True)
    for dist in dists:
        count = copy_distribution(dist, target)
        print(f"copied {dist.metadata['Name']} {dist.version} ({count} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
