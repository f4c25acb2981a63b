"""The ephemeral resources of every entitlement, as `resources/<entitlement>/<label>` holds
them: what placement reads to know where each label is and how much."""

from __future__ import annotations

import logging

from pydantic import ValidationError

from tether.model import from_json
from tether.model.ephemeral import EphemeralResource

_log = logging.getLogger(__name__)


class EphemeralRecords:
    """(entitlement, label) -> its record. Few and small: read with the model."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], EphemeralResource] = {}

    def set(self, name: str, value: bytes | None) -> None:
        """Applies `<entitlement>/<label>`'s current value (None: deleted)."""
        entitlement, _, label = name.partition("/")
        if value is None:
            self.records.pop((entitlement, label), None)
            return
        try:
            record = from_json(EphemeralResource, value, stored=True)
        except ValidationError as error:
            _log.warning("ignoring ephemeral resource %s: not valid: %s", name, error)
            self.records.pop((entitlement, label), None)
            return
        self.records[(entitlement, label)] = record

    def names(self) -> list[str]:
        return [f"{entitlement}/{label}" for entitlement, label in self.records]
