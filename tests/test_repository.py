"""The repository is self-contained: its files point at nothing outside it.

Every text file git knows (tracked, or new and not ignored) is checked for absolute paths of one
machine (home and work directories) and for the design material that lived beside the first
checkout, and every section reference into docs/design.md must name a section it has. Paths the
product or the tests use at runtime (``/proc/self/mountinfo``, ``/etc/podinfo``, ``/tmp``,
``/dev/null``, ``/usr/sbin/sshd``, ``/var/run/secrets/kubernetes.io``, ...) are not machine
paths and are allowed.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from testrigs.source_tree import source_files

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "design.md"

# A directory of one machine: an absolute path starting with one of these top-level names (not
# preceded by a word character, so "tests/work/x" or "https://host/api/root" are fine).
MACHINE_ROOTS = ("work", "home", "Users", "root")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:" + "|".join(MACHINE_ROOTS) + r")(?![\w.-])")
# the original design material, which lived in a sibling directory of the checkout
SIBLING_MATERIAL = re.compile(r"\.\.[/\\]shared\b")
# "docs/design.md §2, §6": every section named after the file name
DESIGN_REFERENCE = re.compile(r"docs/design\.md((?:\s*(?:,|and|or)?\s*§\s*\d+(?:\.\d+)*)+)")
SECTION_NUMBER = re.compile(r"§\s*(\d+(?:\.\d+)*)")
# a section reference into the original document rather than docs/design.md
STALE_REFERENCE = re.compile(r"(?<![\w/.-])design(?:\.md)?\s*§", re.IGNORECASE)
HEADING = re.compile(r"^#{2,}\s+(\d+(?:\.\d+)*)[.\s]", re.MULTILINE)


@cache
def repository_files() -> tuple[Path, ...]:
    """Files git tracks, plus new files it does not ignore (so they are checked before a commit); in
    an unpacked sdist, its files less those .gitignore ignores (testrigs/source_tree.py)."""
    paths = (REPO / name for name in source_files())
    return tuple(path for path in paths if not path.is_symlink())


@cache
def text_lines() -> tuple[tuple[str, int, str], ...]:
    """``(relative path, line number, line)`` of every line of every text file."""
    lines = []
    for path in repository_files():
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary
            continue
        relative = path.relative_to(REPO).as_posix()
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            lines.append((relative, number, line))
    return tuple(lines)


def offenders(pattern: re.Pattern[str]) -> list[str]:
    return [f"{path}:{number}: {line.strip()[:160]}" for path, number, line in text_lines() if pattern.search(line)]


def design_sections() -> set[str]:
    return set(HEADING.findall(DESIGN.read_text(encoding="utf-8")))


def test_no_absolute_path_of_a_machine():
    found = offenders(MACHINE_PATH)
    assert not found, (
        "absolute paths of one machine (top level " + ", ".join(f"/{r}/" for r in MACHINE_ROOTS) + "); "
        "use paths relative to the repository or to a temporary directory:\n" + "\n".join(found)
    )


def test_nothing_refers_to_material_outside_the_repository():
    found = offenders(SIBLING_MATERIAL)
    assert not found, (
        "references to the design material beside the first checkout; what is needed lives in "
        "docs/ and tests/fixtures/:\n" + "\n".join(found)
    )


def test_section_references_point_into_docs_design_md():
    found = offenders(STALE_REFERENCE)
    assert not found, "section references must name docs/design.md, e.g. 'docs/design.md §6':\n" + "\n".join(found)


def test_design_md_references_name_existing_sections():
    sections = design_sections()
    assert {str(n) for n in range(1, 10)} <= sections, f"docs/design.md must keep sections 1-9, has {sorted(sections)}"
    missing = []
    for path, number, line in text_lines():
        numbers = [n for refs in DESIGN_REFERENCE.findall(line) for n in SECTION_NUMBER.findall(refs)]
        if path == "docs/design.md":  # its own cross-references: "§2.1", "as §3 says"
            numbers = SECTION_NUMBER.findall(line)
        missing += [f"{path}:{number}: §{n} ({line.strip()[:120]})" for n in numbers if n not in sections]
    assert not missing, "references to sections docs/design.md does not have:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("see " + "/" + "work/shared/DESIGN.md", True),
        ("file://" + "/" + "home/alice/store", True),
        ("`" + "/" + "Users/bob`", True),
        ("cd " + "/" + "root", True),
        ("/proc/self/mountinfo /etc/podinfo /tmp/x /dev/null /usr/sbin/sshd", False),
        ("/var/run/secrets/kubernetes.io/serviceaccount", False),
        ("tests/work/x https://example.com/api/root/x ~/work", False),
    ],
)
def test_the_machine_path_rule(text, flagged):
    assert bool(MACHINE_PATH.search(text)) is flagged


def test_the_section_reference_rules():
    assert SECTION_NUMBER.findall(DESIGN_REFERENCE.search("(docs/design.md §2, §6 and §5.1)").group(1)) == [
        "2",
        "6",
        "5.1",
    ]
    assert STALE_REFERENCE.search("(" + "DESIGN" + " §8)") and STALE_REFERENCE.search("design" + ".md §4")
    assert not STALE_REFERENCE.search("docs/design.md §4")


def role_table() -> list[dict[str, str]]:
    """backends/__init__.py's table of roles, a dict per row (columns cut where the dashes are)."""
    lines = (Path(__file__).resolve().parent.parent / "backends" / "__init__.py").read_text().splitlines()
    rule = next(i for i, line in enumerate(lines) if re.fullmatch(r"\s*-+(\s+-+)+", line))
    spans = [m.span() for m in re.finditer(r"-+", lines[rule])]
    spans = [(start, spans[i + 1][0] if i + 1 < len(spans) else None) for i, (start, _) in enumerate(spans)]
    header = [lines[rule - 1][a:b].strip() for a, b in spans]
    rows = []
    for line in lines[rule + 1 :]:
        if not line.strip():
            break
        rows.append(dict(zip(header, (line[a:b].strip() for a, b in spans), strict=True)))
    return rows


def test_the_role_table_of_the_backends_names_what_exists():
    """Every name in a backend's column is defined at the top of that backend's module of the role
    (``name_*``: some name starting so)."""
    import ast

    rows = role_table()
    assert [row["module"] for row in rows][:2] == ["backend.py", "options.py"] and len(rows) == 7
    root = Path(__file__).resolve().parent.parent / "backends"
    for row in rows:
        for backend in ("file", "etcd", "kube"):
            if row[backend] == "(none)":
                continue
            tree = ast.parse((root / backend / row["module"]).read_text())
            defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
            defined |= {
                target.id
                for node in tree.body
                if isinstance(node, ast.Assign)
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            for name in (n.strip() for n in row[backend].split(",")):
                exists = any(d.startswith(name[:-1]) for d in defined) if name.endswith("*") else name in defined
                assert exists, f"backends/__init__.py names {name} in backends/{backend}/{row['module']}: not there"


LONGEST_FUNCTION = 50  # lines, decorators excluded


def long_functions(limit: int = LONGEST_FUNCTION) -> list[str]:
    """``path:line name (N lines)`` of every function of the library and the CLI longer than ``limit``."""
    import ast

    found = []
    for package in ("discovery_sync", "backends", "tools"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > limit:
                        found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_of_the_library_is_over_fifty_lines():
    """Long functions are split where a reader would name the part (issue 27)."""
    assert long_functions() == []
    assert long_functions(limit=40), "the check sees the library's functions"


def test_the_file_backend_class_stays_under_four_hundred_lines():
    """FileDiscovery keeps only the wiring; its parts live in modules of their own (issue 27)."""
    tree = ast.parse((REPO / "backends" / "file" / "backend.py").read_text(encoding="utf-8"))
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "FileDiscovery"]
    assert cls.end_lineno is not None
    assert cls.end_lineno - cls.lineno + 1 < 400
