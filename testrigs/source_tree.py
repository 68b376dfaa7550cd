"""The repository's own files, in a git checkout or in an unpacked sdist (which is not one).

In a checkout they are the files git tracks plus the new ones it does not ignore. Elsewhere they
are the files below the root that no .gitignore ignores (the repository's own is in the sdist;
caches such as .hypothesis/ bring theirs). Those files use only the simple patterns read here (a
name or a glob, optionally for directories only); anything else is an error rather than a
silently different list.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def is_git_checkout() -> bool:
    return (REPO / ".git").exists() and shutil.which("git") is not None


def _ignore_patterns(directory: Path) -> list[tuple[str, bool]]:
    """``(pattern, directories only)`` of each line of ``directory``'s .gitignore."""
    patterns = []
    gitignore = directory / ".gitignore"
    lines = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.is_file() else []
    for line in map(str.strip, lines):
        if not line or line.startswith("#"):
            continue
        pattern, directories_only = line.removesuffix("/"), line.endswith("/")
        if "/" in pattern or pattern.startswith("!") or "**" in pattern:
            raise ValueError(f"{gitignore}: {line!r} is not a pattern source_tree.py reads (a name or a glob)")
        patterns.append((pattern, directories_only))
    return patterns


def walk_unignored() -> list[str]:
    """The files below the root that no .gitignore on their way ignores (what git lists as tracked or
    new, as long as nothing ignored is tracked)."""
    inherited = {REPO: _ignore_patterns(REPO)}
    found = []
    for directory, subdirectories, files in os.walk(REPO):
        here = Path(directory)
        patterns = inherited.pop(here)

        def ignored(name: str, is_directory: bool, patterns: list[tuple[str, bool]] = patterns) -> bool:
            if name == ".git":  # a directory, or in a worktree a file
                return True
            return any(
                fnmatch.fnmatchcase(name, glob)
                for glob, only_directories in patterns
                if is_directory or not only_directories
            )

        subdirectories[:] = sorted(d for d in subdirectories if not ignored(d, True))
        for subdirectory in subdirectories:
            inherited[here / subdirectory] = patterns + _ignore_patterns(here / subdirectory)
        found += [(here / name).relative_to(REPO).as_posix() for name in files if not ignored(name, False)]
    return found


@cache
def source_files() -> tuple[str, ...]:
    """Paths relative to the repository root (POSIX), sorted."""
    if is_git_checkout():
        listing = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        ).stdout
        names = {name for name in listing.decode("utf-8", "surrogateescape").split("\0") if name}
    else:
        names = set(walk_unignored())
    return tuple(sorted(name for name in names if (REPO / name).is_file()))


def checkout_copy(destination: Path) -> Path:
    """The repository's files (tracked, or new and not ignored: testrigs/source_tree.py) copied to
    ``destination``: what a clean clone builds, without leaving a build directory in the working tree."""
    for name in source_files():
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, destination / name)
    return destination
