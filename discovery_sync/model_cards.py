"""Which model cards may share an endpoint, and what a re-registration may change.

Two cards conflict unless they serve the same model: base models compare by ``display_name``;
when either is a LoRA adapter (a ``model_suffix`` or a non-null ``lora`` field) they compare by
their base identity, ``source_path`` (falling back to ``display_name``). Aliases are not
compared (as in the reference runtime).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import ConflictError, ValidationError
from .model import Model
from .taints import card_without_taints


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    display_name: str
    source_path: str | None
    is_lora: bool

    @classmethod
    def of(cls, model: Model) -> ModelIdentity:
        card = model.card_json
        display_name = card.get("display_name")
        if not isinstance(display_name, str):
            raise ValidationError(
                f"model card {model.id().to_path()} needs a string display_name, got {display_name!r}"
            )
        source_path = card.get("source_path")
        return cls(
            display_name=display_name,
            source_path=source_path if isinstance(source_path, str) else None,
            is_lora=model.model_suffix is not None or card.get("lora") is not None,
        )

    @property
    def base_identity(self) -> str:
        return self.source_path if self.source_path is not None else self.display_name

    def compatible_with(self, other: ModelIdentity) -> bool:
        if self.is_lora or other.is_lora:
            return self.base_identity == other.base_identity
        return self.display_name == other.display_name


def find_conflicts(candidate: Model, stored: Iterable[Model]) -> list[Model]:
    """The stored models on the candidate's endpoint that serve a different model."""
    identity = ModelIdentity.of(candidate)
    conflicts = []
    for other in stored:
        if other.id() == candidate.id() or other.endpoint_id != candidate.endpoint_id:
            continue
        try:
            other_identity = ModelIdentity.of(other)
        except ValidationError:
            continue  # a malformed card of another writer does not block this endpoint
        if not identity.compatible_with(other_identity):
            conflicts.append(other)
    return conflicts


def find_conflict(candidate: Model, stored: Iterable[Model]) -> Model | None:
    """The first stored model on the candidate's endpoint that serves a different model."""
    conflicts = find_conflicts(candidate, stored)
    return conflicts[0] if conflicts else None


def conflict_error(candidate: Model, other: Model) -> ConflictError:
    return ConflictError(
        f"cannot register model {candidate.card_json.get('display_name')!r} on endpoint "
        f"'{candidate.namespace}/{candidate.component}/{candidate.endpoint}': a different model "
        f"{other.card_json.get('display_name')!r} is already registered there (instance {other.instance_id:x}); "
        "serve it on another endpoint or unregister the other model first"
    )


def check_replay(existing: Model, candidate: Model) -> None:
    """A same-id re-registration may differ only in ``runtime_config.taints``."""
    if card_without_taints(existing.card_json) != card_without_taints(candidate.card_json):
        raise ConflictError(
            f"model card {existing.id().to_path()} is already registered with different content; "
            "a re-registration may change only runtime_config.taints (use update_model_taints), "
            "so unregister it first to change anything else"
        )
