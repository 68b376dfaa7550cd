"""What needs no store: every command's help, global flags before or after the command, --version,
``python -m discovery_sync`` and ``manifests``."""

from __future__ import annotations

import subprocess
import sys

import pytest
from discovery_sync.tools import cli
from discovery_sync.tools.commands import manifest_texts

import discovery_sync as ds

COMMANDS = ["list", "get", "watch", "register", "doctor", "gc", "manifests", "demo", "bench"]


def help_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*args, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_a_description_and_examples(command, capsys):
    text = help_of(capsys, command)
    usage, _, rest = text.partition("\n\n")
    assert usage.startswith(f"usage: discovery-sync {command}")
    description = rest.split("\n\n")[0]
    assert len(description) > 40, text
    assert "\nexamples:\n" in text and f"discovery-sync {command}" in text.split("examples:")[1]
    assert "--url" in text and "--timeout" in text and "--output" in text  # global flags after the command too
    assert "``" not in text  # no reStructuredText markup


def test_the_main_help_lists_every_command_without_markup(capsys):
    text = help_of(capsys)
    for command in COMMANDS:
        assert f"    {command} " in text
    assert "``" not in text and ":func:" not in text
    assert "examples:" in text and "completion" in text


def test_register_help_documents_a_spec_of_each_kind_that_parses(capsys):
    text = help_of(capsys, "register")
    for kind in ("Endpoint", "Model", "EventChannel", "EventSource"):
        assert f'{{"type": "{kind}"' in text
    # each example spec in the help is a spec the command accepts
    import json

    examples = [block for block in text.split("\n\n") if block.strip().startswith('{"type"')]
    assert len(examples) == 4
    for block in examples:
        spec_text = "".join(line.strip() for line in block.splitlines() if not line.startswith("      "))
        ds.spec_from_dict(json.loads(spec_text))


@pytest.mark.parametrize(
    "argv",
    [
        ["--url", "memory://a", "--timeout", "2", "-o", "yaml", "list"],
        ["list", "--url", "memory://a", "--timeout", "2", "-o", "yaml"],
        ["--url", "memory://a", "list", "--timeout", "2", "--output", "yaml"],
        ["-o", "yaml", "--timeout", "2", "list", "--url", "memory://a"],
    ],
)
def test_global_flags_work_before_or_after_the_command(argv):
    args = cli.build_parser().parse_args(argv)
    assert (args.url, args.timeout, args.output, args.command) == ("memory://a", 2.0, "yaml", "list")


def test_global_flags_default_when_given_nowhere():
    args = cli.build_parser().parse_args(["list"])
    assert (args.url, args.timeout, args.output, args.kind) == (None, 5.0, None, "all")
    assert cli.build_parser().parse_args(["watch"]).kind == "endpoints"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["list", "--kind", "foo"], "invalid kind 'foo': choose all, endpoints"),
        (["watch", "--kind", "all"], "invalid kind 'all': choose endpoints"),
        (["list", "--timeout", "0"], "'0' is not a positive number of seconds"),
        (["list", "-o", "xml"], "invalid choice: 'xml'"),
        (["watch", "--count", "0"], "'0' is not a positive whole number"),
    ],
)
def test_bad_flags_are_one_line_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == cli.EXIT_USAGE_ERROR
    (line,) = capsys.readouterr().err.splitlines()
    assert message in line and line.startswith("discovery-sync: error: ")


@pytest.mark.parametrize("module", ["discovery_sync", "discovery_sync.tools"])
def test_version_names_the_package_and_python(module):
    result = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"discovery-sync {ds.__version__} (Python {sys.version.split()[0]})"


def test_python_m_discovery_sync_runs_the_cli():
    result = subprocess.run(
        [sys.executable, "-m", "discovery_sync", "list", "--kind", "x"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "invalid kind 'x'" in result.stderr


def test_importing_the_library_imports_no_cli_module():
    code = "import sys, discovery_sync; print(sorted(m for m in sys.modules if m.startswith('discovery_sync.tools')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def test_manifests_print_the_crd_and_rbac_as_yaml_documents():
    import yaml

    result = subprocess.run(
        [sys.executable, "-m", "discovery_sync.tools", "manifests"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(result.stdout) if doc]
    assert kinds == ["CustomResourceDefinition", "Role", "RoleBinding"]
    assert result.stdout == "---\n".join(manifest_texts(["crd", "rbac"]))
    crd = subprocess.run(
        [sys.executable, "-m", "discovery_sync.tools", "manifests", "--crd"], capture_output=True, text=True, timeout=60
    )
    assert [doc["kind"] for doc in yaml.safe_load_all(crd.stdout) if doc] == ["CustomResourceDefinition"]


def test_manifests_need_no_kubernetes_client():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in ('kubernetes', 'urllib3'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from discovery_sync.tools.cli import main\n"
        "sys.exit(main(['manifests', '--rbac']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "kind: RoleBinding" in result.stdout and "CustomResourceDefinition" not in result.stdout
