"""Model suffixes (issue 25, case 6): the last segment of a LoRA card's store key.

The reference splits a model key at every ``/`` (``ModelCardInstanceId::from_path`` takes 4 or 5
parts), so a card registered under ``a/b`` stays listed by its frontends after it is
unregistered; register() refuses such a suffix and shows the slug the reference's Python
bindings would have stored (``register_model(lora_name=...)``), which ``ds.lora_suffix`` computes.
"""

from __future__ import annotations

import orjson
import pytest
from discovery_sync.tools import cli

import discovery_sync as ds
from discovery_sync.pathcodec import decode, encode_filename

# lora_name -> the suffix ai-dynamo-runtime 1.6.1 stored for it (register_model(..., lora_name=NAME)
# on a file store, read back from the file names)
REFERENCE_SLUGS = {
    "adapter-a": "adapter-a",
    "a/b": "a_b",
    "My LoRA.Adapter": "my_lora_adapter",
    "__x-Y_z": "x-y_z",
    "Ünï/çødé": "n____d_",
    "...": "",
}


def spec(suffix):
    return ds.ModelSpec("ns", "backend", "generate", {"display_name": "adapter", "lora": {"name": "x"}}, suffix)


def test_lora_suffix_is_the_slug_the_reference_stores():
    assert {name: ds.lora_suffix(name) for name in REFERENCE_SLUGS} == REFERENCE_SLUGS
    with pytest.raises(ds.ValidationError, match="a LoRA name must be a string"):
        ds.lora_suffix(b"a/b")


def test_register_refuses_a_suffix_with_a_slash_and_shows_the_slug_to_use():
    with ds.connect("memory://suffix-slash") as client:
        for suffix, slug in [("a/b", "a_b"), ("Team/My LoRA", "team_my_lora"), ("v1/", "v1_")]:
            with pytest.raises(
                ds.ValidationError, match=rf"model_suffix '{suffix}' must not contain '/'.*use '{slug}'"
            ):
                client.register(spec(suffix))
        with pytest.raises(ds.ValidationError, match="choose a suffix with letters or digits"):
            client.register(spec("/"))  # its slug would be empty
        assert client.list(ds.Query.models()) == []
        stored = client.register(spec(ds.lora_suffix("a/b")))
        assert stored.id().to_path().endswith("/a_b")


def test_register_refuses_an_empty_suffix_and_names_the_base_card_instead():
    with ds.connect("memory://suffix-empty") as client:
        with pytest.raises(ds.ValidationError, match=r"model_suffix must not be empty: leave it out \(None\)"):
            client.register(spec(""))
        assert client.list(ds.Query.models()) == []


def test_suffixes_are_checked_like_names_every_other_way():
    with ds.connect("memory://suffix-names") as client:
        for bad, problem in [
            (5, "model_suffix must be a string, got int"),
            ("x" * 256, "model_suffix is 256 bytes long; at most 255"),
            ("é" * 128, "model_suffix is 256 bytes long"),
            ("a\udc80", "model_suffix is not valid Unicode text"),
        ]:
            with pytest.raises(ds.ValidationError, match=problem):
                client.register(spec(bad))
        # anything else round-trips through the key: paths split at '/' only, file names percent-encode
        for good in ["x" * 255, "a b", "ünï", "%2F", "..", ".", "a.b", "A_B-c", "\\", "?#"]:
            stored = client.register(spec(good))
            identity = stored.id()
            assert ds.id_from_path(ds.RecordKind.MODEL, identity.to_path()) == identity
            assert decode(encode_filename(identity.to_path())) == identity.to_path()
            client.unregister(stored)
        assert client.list(ds.Query.models()) == []


def test_a_stored_card_with_a_slash_in_its_suffix_is_still_read():
    # another writer (the reference's Rust API takes any suffix) may have stored one: it is refused
    # on the way in only, so readers see what the reference's readers see
    record = ds.Model("ns", "backend", "generate", 0x2A, {"display_name": "m"}, "a/b")
    parsed = ds.instance_from_json(ds.instance_to_json(record))
    assert parsed == record and parsed.id().to_path() == "ns/backend/generate/2a/a/b"
    assert ds.id_from_key("v1/mdc/ns/backend/generate/2a/a/b") == record.id()
    with pytest.raises(ds.ValidationError, match="use 'a_b'"):
        ds.spec_from_dict({k: v for k, v in record.to_dict().items() if k != "instance_id"})


def test_the_cli_refuses_such_a_spec_before_opening_the_store(tmp_path, capsys):
    spec_file = tmp_path / "lora.json"
    names = {"namespace": "ns", "component": "backend", "endpoint": "generate"}
    spec_file.write_bytes(
        orjson.dumps({"type": "Model", **names, "card_json": {"display_name": "m"}, "model_suffix": "team/my-lora"})
    )
    store = tmp_path / "store"
    try:
        code = cli.main(["--url", f"file://{store}", "register", "--no-hold", str(spec_file)])
    except SystemExit as exc:
        code = exc.code
    error = capsys.readouterr().err
    assert code == 2, error
    assert "must not contain '/'" in error and "use 'team_my-lora'" in error
    assert not store.exists()
