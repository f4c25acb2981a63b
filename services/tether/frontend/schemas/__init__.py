"""Response bodies of the REST API, one module per resource."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from starlette.responses import Response


def json_response(
    body: BaseModel, status_code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """`body` as a JSON response. Routes return it directly: FastAPI would validate it again,
    and stored jobs may exceed a task limit lowered since they were accepted."""
    return Response(
        body.model_dump_json(),
        status_code=status_code,
        headers=headers,
        media_type="application/json",
    )


class View(BaseModel):
    """A response body, built from store records that were validated when they were read."""

    model_config = ConfigDict(frozen=True)

    def response(self, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
        """This view as a JSON response (`json_response`)."""
        return json_response(self, status_code, headers)
