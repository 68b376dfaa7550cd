"""Typed model cards: ModelSpec.from_card / card_json_of and Model.card_as / card_as (the reference's
DiscoverySpec::from_model and DiscoveryInstance::deserialize_model)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any

import pytest

import discovery_sync as ds
from tests.unit.helpers import COMP, EP, NS, endpoint, event_channel, event_source, model

try:
    import pydantic
except ImportError:  # pydantic is a test extra; the core never needs it
    pydantic = None

needs_pydantic = pytest.mark.skipif(pydantic is None, reason="pydantic is not installed")


@dataclasses.dataclass
class Engine:
    name: str
    tensor_parallel: int = 1


@dataclasses.dataclass
class Lora:
    name: str
    base_model_path: str


@dataclasses.dataclass
class Card:
    display_name: str
    engine: Engine
    context_length: int | None = None
    lora: Lora | None = None
    tags: list[str] = dataclasses.field(default_factory=list)
    adapters: list[Lora] = dataclasses.field(default_factory=list)
    engines_by_role: dict[str, Engine] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Positive:
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or self.count <= 0:
            raise ValueError(f"count must be a positive integer, got {self.count!r}")


@dataclasses.dataclass
class Awkward:
    """Fields named like the builder's own parameters."""

    cls: str
    path: str


class Plain:
    def __init__(self, display_name: str, context_length: int = 0) -> None:
        self.display_name = display_name
        self.context_length = context_length


if pydantic is not None:

    class EngineModel(pydantic.BaseModel):
        name: str
        tensor_parallel: int = 1

    class CardModel(pydantic.BaseModel):
        display_name: str
        engine: EngineModel
        context_length: int | None = None
        tags: list[str] = pydantic.Field(default_factory=list)


@pytest.fixture
def client() -> Iterator[ds.Discovery]:
    with ds.connect("memory://typed-cards") as client:
        yield client


def stored(client: ds.Discovery, spec: ds.ModelSpec) -> ds.Model:
    """``spec`` registered, then read back with list()."""
    registered = client.register(spec)
    listed = [record for record in client.list(ds.Query.models(NS, COMP, EP)) if record.id() == registered.id()]
    assert len(listed) == 1
    assert isinstance(listed[0], ds.Model)
    return listed[0]


FULL_CARD = Card(
    "Qwen/Qwen3-0.6B",
    Engine("vllm", tensor_parallel=2),
    context_length=32768,
    lora=Lora("sql", "/models/sql"),
    tags=["chat", "tools"],
    adapters=[Lora("a", "/a"), Lora("b", "/b")],
    engines_by_role={"prefill": Engine("sglang"), "decode": Engine("vllm", 4)},
)


@pytest.mark.parametrize("card", [FULL_CARD, Card("Qwen/Qwen3-0.6B", Engine("vllm"))], ids=["full", "defaults"])
def test_a_dataclass_card_round_trips_through_the_store(client, card):
    instance = stored(client, ds.ModelSpec.from_card(NS, COMP, EP, card))
    assert instance.card_json["engine"] == dataclasses.asdict(card.engine)
    assert instance.card_as(Card) == card
    assert ds.card_as(instance, Card) == card


@needs_pydantic
def test_a_pydantic_card_round_trips_through_the_store(client):
    card = CardModel(display_name="Qwen/Qwen3-0.6B", engine=EngineModel(name="vllm"), tags=["chat"])
    instance = stored(client, ds.ModelSpec.from_card(NS, COMP, EP, card, model_suffix="lora-sql"))
    assert instance.model_suffix == "lora-sql"
    assert instance.card_json == card.model_dump(mode="json")
    assert instance.card_as(CardModel) == card


@needs_pydantic
def test_a_pydantic_v1_card_round_trips_through_the_store(client):
    v1 = pytest.importorskip("pydantic.v1")

    class OldCard(v1.BaseModel):
        display_name: str
        context_length: int = 0

    card = OldCard(display_name="Qwen/Qwen3-0.6B", context_length=4096)
    instance = stored(client, ds.ModelSpec.from_card(NS, COMP, EP, card))
    assert instance.card_json == {"display_name": "Qwen/Qwen3-0.6B", "context_length": 4096}
    assert instance.card_as(OldCard) == card
    with pytest.raises(ds.ValidationError, match="OldCard: context_length"):
        model(card_json={"display_name": "x", "context_length": "many"}).card_as(OldCard)


def test_a_mapping_card_round_trips_through_the_store(client):
    card = MappingProxyType({"display_name": "Qwen/Qwen3-0.6B", "runtime_config": {"max_num_seqs": 8}})
    spec = ds.ModelSpec.from_card(NS, COMP, EP, card)
    assert type(spec.card_json) is dict
    instance = stored(client, spec)
    assert instance.card_as(dict) == dict(card)


def test_card_json_of_copies_mappings_and_flattens_dataclasses():
    card = {"display_name": "x"}
    copied = ds.card_json_of(card)
    assert copied == card and copied is not card
    assert ds.card_json_of(Card("x", Engine("vllm"))) == {
        "display_name": "x",
        "engine": {"name": "vllm", "tensor_parallel": 1},
        "context_length": None,
        "lora": None,
        "tags": [],
        "adapters": [],
        "engines_by_role": {},
    }


@pytest.mark.parametrize("card", [42, {1, 2}, "card", b"{}", None, Card], ids=repr)
def test_card_json_of_refuses_what_is_not_a_card(card):
    with pytest.raises(ds.ValidationError, match="a mapping, a dataclass instance or a pydantic model instance"):
        ds.card_json_of(card)


def test_a_card_that_is_not_storable_json_is_refused_by_register(client):
    @dataclasses.dataclass
    class WithSet:
        names: set[str]

    spec = ds.ModelSpec.from_card(NS, COMP, EP, WithSet({"a"}))
    with pytest.raises(ds.ValidationError, match=r"names"):
        client.register(spec)
    assert client.list(ds.Query.models(NS, COMP, EP)) == []


def test_unknown_keys_are_ignored():
    card = {"display_name": "x", "engine": {"name": "vllm", "quantisation": "fp8"}, "checksum": "abc"}
    assert model(card_json=card).card_as(Card) == Card("x", Engine("vllm"))


def test_a_missing_required_field_is_named():
    with pytest.raises(ds.ValidationError, match=r"card_json does not fit Card: .*required field 'engine'"):
        model(card_json={"display_name": "x"}).card_as(Card)
    with pytest.raises(ds.ValidationError, match=r"card_json\[\"engine\"\] does not fit Engine: .*'name'"):
        model(card_json={"display_name": "x", "engine": {}}).card_as(Card)
    with pytest.raises(ds.ValidationError, match=r"card_json\[\"adapters\"\]\[1\] does not fit Lora"):
        adapters = [{"name": "a", "base_model_path": "/a"}, {"name": "b"}]
        model(card_json={"display_name": "x", "engine": {"name": "e"}, "adapters": adapters}).card_as(Card)


def test_a_non_object_where_a_dataclass_is_expected_is_refused():
    for engine in ("vllm", None, ["vllm"]):
        with pytest.raises(ds.ValidationError, match=r"card_json\[\"engine\"\] must be a JSON object to build Engine"):
            model(card_json={"display_name": "x", "engine": engine}).card_as(Card)


def test_a_value_the_class_rejects_is_a_validation_error_with_the_cause_chained():
    with pytest.raises(ds.ValidationError, match="card_json does not fit Positive: count must be a positive") as info:
        model(card_json={"count": -1}).card_as(Positive)
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(ds.ValidationError, match="card_json does not fit Plain"):
        model(card_json={"display_name": "x", "extra": 1}).card_as(Plain)


def test_any_class_is_built_from_the_card_as_keyword_arguments():
    built = model(card_json={"display_name": "x", "context_length": 8}).card_as(Plain)
    assert (built.display_name, built.context_length) == ("x", 8)
    assert model(card_json={"cls": "a", "path": "b"}).card_as(Awkward) == Awkward("a", "b")


@pytest.mark.parametrize(
    ("instance", "message"),
    [
        (endpoint(), "ns/comp/ep/2a is an endpoint, not a model card"),
        (event_channel(), "is an event channel, not a model card"),
        (event_source(), "is an event source, not a model card"),
    ],
    ids=["endpoint", "event channel", "event source"],
)
def test_other_kinds_of_record_have_no_card(instance, message):
    with pytest.raises(ds.ValidationError, match=message):
        instance.card_as(Card)
    with pytest.raises(ds.ValidationError, match=message):
        ds.card_as(instance, dict)


@pytest.mark.parametrize("instance", [{"display_name": "x"}, 42, None, ds.ModelSpec(NS, COMP, EP, {})], ids=repr)
def test_card_as_needs_a_model_instance(instance):
    with pytest.raises(ds.ValidationError, match="expected a Model instance"):
        ds.card_as(instance, dict)


def test_card_as_needs_a_class():
    with pytest.raises(TypeError, match="needs a class"):
        model().card_as(lambda **card: card)


def test_the_result_shares_nothing_with_the_instance():
    instance = model(card_json={"display_name": "x", "engine": {"name": "e"}, "tags": ["a"]})
    card = instance.card_as(Card)
    card.tags.append("b")
    as_dict = instance.card_as(dict)
    as_dict["engine"]["name"] = "changed"
    assert instance.card_json == {"display_name": "x", "engine": {"name": "e"}, "tags": ["a"]}


def test_fields_whose_annotation_does_not_resolve_get_the_json_value():
    @dataclasses.dataclass
    class Local:
        value: int

    @dataclasses.dataclass
    class WithLocal:  # "Local" cannot be resolved from the module: get_type_hints fails
        engine: Engine
        local: Local

    built = model(card_json={"engine": {"name": "e"}, "local": {"value": 1}}).card_as(WithLocal)
    assert built.engine == Engine("e")
    assert built.local == {"value": 1}


@needs_pydantic
def test_a_pydantic_validation_error_becomes_ours():
    card = {"display_name": "x", "engine": {"tensor_parallel": "many"}, "context_length": "long"}
    with pytest.raises(ds.ValidationError) as info:
        model(card_json=card).card_as(CardModel)
    error = info.value
    assert isinstance(error, ds.DiscoveryError)
    assert not isinstance(error, pydantic.ValidationError)
    assert isinstance(error.__cause__, pydantic.ValidationError)
    text = str(error)
    assert text.startswith("card_json does not fit CardModel: ")
    assert "engine.name: Field required" in text
    assert "context_length" in text
    assert "errors.pydantic.dev" not in text  # shortened: no links, one line
    assert "\n" not in text


def test_many_pydantic_style_errors_are_summarised():
    class Strict:
        @classmethod
        def model_validate(cls, data: Any) -> Strict:
            raise ValueError("ignored", [])

    class Failing(ValueError):
        def errors(self) -> list[dict[str, Any]]:
            return [{"loc": (f"field{index}",), "msg": "bad"} for index in range(5)]

    class Summarised:
        @classmethod
        def model_validate(cls, data: Any) -> Summarised:
            raise Failing("long\ntext")

    with pytest.raises(ds.ValidationError, match=r"field0: bad; field1: bad; field2: bad \(and 2 more\)$"):
        model().card_as(Summarised)
    with pytest.raises(ds.ValidationError, match=r"does not fit Strict: \('ignored', \[\]\)$"):
        model().card_as(Strict)
