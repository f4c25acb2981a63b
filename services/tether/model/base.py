"""The strict base model, the constrained types every model shares, and JSON helpers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Final, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

# The largest integer that JSON (an IEEE double in most readers), etcd values and numpy int64
# columns all represent exactly.
MAX_QUANTITY: Final = 2**53 - 1


class TetherModel(BaseModel):
    """Base of every Tether model: strict types, no unknown fields, immutable once built.

    Strict python-mode validation rejects strings for enums and datetimes, so all external input
    (REST bodies, YAML files converted to JSON) must go through `from_json`, whose JSON mode
    accepts them.
    """

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True
    )


M = TypeVar("M", bound=TetherModel)
H = TypeVar("H", bound=Hashable)


def to_json(model: TetherModel) -> bytes:
    """Serialise `model` to the JSON bytes the store keeps (every field, defaults included)."""
    return model.__pydantic_serializer__.to_json(model)


STORED_CONTEXT = "stored"


def from_json(cls: type[M], data: bytes | str, *, stored: bool = False) -> M:
    """Validate JSON `data` as a `cls`; raises pydantic.ValidationError on invalid input.

    `stored=True` is for records read back from the store: admission rules that an operator may
    tighten later (the region's task limit) were checked when the record was accepted and are
    not re-applied, so that existing jobs keep loading.
    """
    return cls.model_validate_json(data, context={STORED_CONTEXT: True} if stored else None)


@dataclass(frozen=True, slots=True)
class TextRule:
    """Annotation checking a string against `pattern`; `rule` is the error when it fails."""

    pattern: str
    rule: str
    error_type: str

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        # The pattern runs inside pydantic-core rather than in a Python validator: loading a
        # region's million machines from the store checks several names per machine.
        return core_schema.chain_schema(
            [
                handler(source),
                core_schema.custom_error_schema(
                    core_schema.str_schema(pattern=self.pattern),
                    custom_error_type=self.error_type,
                    custom_error_message=self.rule,
                ),
            ]
        )

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "pattern": self.pattern, "description": self.rule}


_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"

NAME_RULE: Final = (
    "must be 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit"
)
Name = Annotated[str, TextRule(rf"^{_LABEL}$", NAME_RULE, "invalid_name")]
"""A DNS label: the name of anything a person addresses (job, entitlement, machine, DC...)."""

_NAME: TypeAdapter[str] = TypeAdapter(Name)


def check_name(text: str, what: str) -> str:
    """`text` if it is a valid `Name`; ValueError saying which `what` is wrong otherwise."""
    try:
        return _NAME.validate_python(text)
    except ValidationError:
        raise ValueError(f"invalid {what} {text!r}: {NAME_RULE}") from None


JOB_HANDLE_RULE: Final = f"must be '<entitlement>/<job>', where both parts {NAME_RULE}"
JobHandle = Annotated[str, TextRule(rf"^{_LABEL}/{_LABEL}$", JOB_HANDLE_RULE, "invalid_job_handle")]
"""`<entitlement>/<job name>`: identifies a job in the region."""

AttributeKey = Annotated[
    str,
    TextRule(
        r"^[a-z0-9._/-]{1,63}$",
        "must be 1-63 characters of a-z, 0-9, '.', '_', '/' and '-'",
        "invalid_attribute_key",
    ),
]
"""The key of a machine attribute (label), as constraints and preferences name it."""

AttributeValue = Annotated[str, StringConstraints(max_length=256)]

Version = Annotated[
    str,
    TextRule(
        r"^[A-Za-z0-9._+-]{1,64}$",
        "must be 1-64 characters of A-Z, a-z, 0-9, '.', '_', '+' and '-'",
        "invalid_version",
    ),
]
"""A package version."""

Identifier = Annotated[
    str,
    TextRule(
        r"^[A-Za-z0-9-]{1,64}$",
        "must be 1-64 characters of A-Z, a-z, 0-9 and '-' (a UUID fits)",
        "invalid_identifier",
    ),
]
"""A generated identifier, such as the UUID of an operation or a maintenance notice."""

Quantity = Annotated[int, Field(ge=0, le=MAX_QUANTITY)]
"""A non-negative integer that JSON, etcd and int64 columns all hold exactly."""

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonEmptyStr = Annotated[str, StringConstraints(min_length=1)]
Timestamp = AwareDatetime
"""A point in time; naive datetimes are rejected because their meaning depends on the host."""

FIRST_PLANNED_YEAR: Final = 1000
LAST_PLANNED_YEAR: Final = 8999


def _plannable(moment: datetime) -> datetime:
    if not FIRST_PLANNED_YEAR <= moment.year <= LAST_PLANNED_YEAR:
        raise PydanticCustomError(
            "unplannable_time",
            "must be in the years {first} to {last}",
            {"first": FIRST_PLANNED_YEAR, "last": LAST_PLANNED_YEAR},
        )
    return moment


PlannedTime = Annotated[
    AwareDatetime,
    AfterValidator(_plannable),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": r"^[1-8][0-9]{3}-"}),
]
"""A time a person sets (a deadline, the start of maintenance): in the years 1000 to 8999, so
that it is a date in UTC too, and so is any duration after it."""


def no_duplicates(items: list[H]) -> list[H]:
    """Reject a list that names the same item twice (a validator for `Annotated` lists)."""
    repeated = [item for item, seen in Counter(items).items() if seen > 1]
    if repeated:
        raise PydanticCustomError(
            "duplicate_items",
            "must not repeat items, but has {repeated} more than once",
            # An enum's value, as the client wrote it, not its Python repr.
            {"repeated": ", ".join(repr(getattr(item, "value", item)) for item in repeated)},
        )
    return items


@dataclass(frozen=True, slots=True)
class NoDuplicates:
    """Annotation of a list that `no_duplicates` checks, documented as JSON Schema's
    `uniqueItems` so that clients know before they send it."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(no_duplicates, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), "uniqueItems": True}


NO_DUPLICATES: Final = NoDuplicates()

NameList = Annotated[list[Name], NO_DUPLICATES]
"""Names in a meaningful order, each at most once."""


def problems_text(error: ValidationError, *, whole: str = "value", most: int | None = None) -> str:
    """A validation error in one line, e.g. "spec.count: Input should be greater than 0";
    `whole` names a problem of the whole value, and past `most` problems the rest are counted."""
    problems = [
        f"{'.'.join(map(str, problem['loc'])) or whole}: {problem['msg']}"
        for problem in error.errors(include_url=False)
    ]
    shown = problems if most is None else problems[:most]
    more = f" (and {len(problems) - len(shown)} more)" if len(problems) > len(shown) else ""
    return "; ".join(shown) + more


def same_but_updated_at(old: TetherModel, new: TetherModel) -> bool:
    """Whether two records differ at most in their `updated_at`: a status written again only
    to say it was looked at anew would wake every watcher for nothing."""
    cleared = {"updated_at": None}
    return old.model_copy(update=cleared) == new.model_copy(update=cleared)
