"""The ephemeral resources of every entitlement, as `resources/<entitlement>/<label>` holds
them: what placement reads to know where each label is and how much."""

from __future__ import annotations

import logging

from pydantic import ValidationError

from tether.model import from_json
from tether.model.ephemeral import EphemeralResource

_log = logging.getLogger(__name__)


class EphemeralRecords:
    """(entitlement, label) -> its record and the revision it was written at. Few and small:
    read with the model."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], EphemeralResource] = {}
        self.revisions: dict[tuple[str, str], int] = {}

    def set(self, name: str, value: bytes | None, revision: int) -> None:
        """Applies `<entitlement>/<label>`'s value written at `revision` (None: deleted)."""
        entitlement, _, label = name.partition("/")
        key = (entitlement, label)
        record = None
        if value is not None:
            try:
                record = from_json(EphemeralResource, value, stored=True)
            except ValidationError as error:
                _log.warning("ignoring ephemeral resource %s: not valid: %s", name, error)
        if record is None:
            self.records.pop(key, None)
            self.revisions.pop(key, None)
        else:
            self.records[key] = record
            self.revisions[key] = revision

    def names(self) -> list[str]:
        return [f"{entitlement}/{label}" for entitlement, label in self.records]
