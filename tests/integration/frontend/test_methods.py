"""A method a path does not take: 405, and an `Allow` naming every method the path takes (RFC
9110), where Starlette named only those of the path's first route."""

from __future__ import annotations

import re

from tests.integration.frontend.conftest import ADMIN, Region
from tests.integration.frontend.problems import assert_problem
from tether.frontend.app import openapi_document


async def test_a_405_allows_every_method_of_the_path(region: Region) -> None:
    paths = openapi_document()["paths"]
    assert len([path for path, methods in paths.items() if len(methods) > 1]) >= 10
    for template, methods in paths.items():
        # Any value fits a parameter: the method is refused before anything is looked up.
        path = re.sub(r"\{index\}", "0", re.sub(r"\{(?!index\})[a-z_]+\}", "x", template))
        refused = await region.api.request("OPTIONS", path, headers=ADMIN)
        assert_problem(refused, 405, "Method Not Allowed")
        allowed = sorted(method.upper() for method in methods)
        assert refused.headers["allow"] == ", ".join(allowed), template


async def test_a_job_takes_get_patch_and_delete(region: Region) -> None:
    refused = await region.api.put("/v1/jobs/team-a/web", headers=ADMIN, json={})
    assert refused.status_code == 405
    assert refused.headers["allow"] == "DELETE, GET, PATCH"
    assert refused.headers["content-type"] == "application/problem+json"
