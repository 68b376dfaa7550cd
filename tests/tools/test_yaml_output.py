"""``-o yaml`` writes YAML that parses back to the records' JSON (issue 28, point 7).

The emitter is called directly on random records (fast), and read back by PyYAML's safe loader,
both the libyaml one (``yaml.CSafeLoader``) and the pure one (``yaml.SafeLoader``); then the
command line runs once on a store holding what used to break it: emoji (surrogate pairs that
libyaml refused), a key over 1,024 characters (an implicit key YAML readers refuse), floats
such as 1e-05 and 1e+16 (strings to YAML 1.1 without a dot).
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import orjson
import pytest
import yaml
from discovery_sync.tools import output
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import discovery_sync as ds
from tests.tools.terminal import command, environment

LOADERS = [yaml.CSafeLoader, yaml.SafeLoader]
BOUNDED = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# any character JSON carries: astral ones (emoji), C0, C1, DEL, bidi and line separators included
characters = st.characters(exclude_categories=("Cs",))
text = st.text(characters, max_size=20) | st.sampled_from(
    ["", "yes", "no", "on", "null", "~", "1e-05", "0x1f", "- a", "a: b", "#", "'", '"', "\\", "\U0001f600", "\x85"]
)
keys = text | st.text(characters, min_size=1000, max_size=1100)  # around YAML's 1,024-character key limit
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)  # what a stored record may hold
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e-05, 1e16, 1e300, 5e-324, -0.0, 2.5e-10, 123456789.0])
    | text
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=14,
)
cards = st.builds(
    lambda name, extra: {"display_name": name, **extra}, text, st.dictionaries(keys, json_values, max_size=4)
)
names = st.text(characters, min_size=1, max_size=8).filter(lambda n: "/" not in n)
records = st.one_of(
    st.builds(ds.Model, names, names, names, st.integers(0, 2**64 - 1), cards, st.none() | names),
    st.builds(
        ds.EventSource,
        st.builds(ds.EventScope, names),
        names,
        st.integers(0, 2**64 - 1),
        st.dictionaries(keys, json_values, max_size=4),
    ),
)


@pytest.mark.parametrize("loader", LOADERS, ids=["libyaml", "pure"])
@BOUNDED
@given(record=records)
def test_random_records_read_back_as_their_json(loader, record):
    data = record.to_dict()
    as_json = orjson.loads(output.to_json(data))
    assert as_json == data
    assert yaml.load(output.to_yaml(data), Loader=loader) == as_json


@pytest.mark.parametrize("loader", LOADERS, ids=["libyaml", "pure"])
def test_the_cases_that_broke_it(loader):
    data = {
        "emoji": "\U0001f600 \U0001f9e0",
        "k" * 1500: {"nested": ["x" * 2000, {"y" * 1100: 1e-05}]},
        "list": [{"z" * 1030: []}, {"w" * 1030: {"a": 1}}],
        "floats": [1e-05, 1e16, 1e300, -2.5e-10, 0.1],
        "controls": "\x00\x1b[2J\r\n\t\x7f\x9b\u202e\u2028\ufeff\uffff",
    }
    text = output.to_yaml(data)
    assert yaml.load(text, Loader=loader) == data
    assert "\\ud83d" not in text and "\U0001f600" in text  # the emoji itself, never a surrogate pair
    assert "floats:\n- 1.0e-05\n- 1.0e+16\n- 1.0e+300\n- -2.5e-10\n- 0.1\n" in text.replace("  ", "")


@pytest.mark.parametrize("loader", LOADERS, ids=["libyaml", "pure"])
def test_non_finite_floats_are_yaml_infinities(loader):
    """A record never holds them (JSON has none: register() refuses them), but a float is a float."""
    back = yaml.load(output.to_yaml([math.inf, -math.inf, math.nan]), Loader=loader)
    assert back[:2] == [math.inf, -math.inf] and math.isnan(back[2])


def test_the_command_line_writes_yaml_both_loaders_read_as_its_json(tmp_path: Path):
    url = f"file://{tmp_path / 'store'}?ttl=3600"
    card = {"display_name": "\U0001f600 model", "k" * 1100: [1e-05, 1e16], "big": 2**63 - 1, "small": -(2**63)}
    with ds.connect(url) as client:
        client.register(ds.ModelSpec("ns", "backend", "generate", card))
        client.register(ds.EventSourceSpec(ds.EventScope("ns"), "kv\U0001f600", 7, {"\u202e": "\x1b"}))

        def run(fmt: str) -> str:
            args = command("list", "--url", url, "-o", fmt)
            result = subprocess.run(args, capture_output=True, text=True, timeout=60, env=environment())
            assert result.returncode == 0 and result.stderr == "", result.stderr
            return result.stdout

        as_json = [orjson.loads(line) for line in run("json").splitlines()]
        assert [record["type"] for record in as_json] == ["Model", "EventSource"]
        text = run("yaml")
        for loader in LOADERS:
            assert list(yaml.load_all(text, Loader=loader)) == as_json
