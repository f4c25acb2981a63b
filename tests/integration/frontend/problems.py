"""Checks on problem+json answers shared by the frontend's API tests."""

from __future__ import annotations

from typing import Any

import httpx


def assert_problem(response: httpx.Response, status: int, *fragments: str) -> dict[str, Any]:
    """The response is a problem+json with `status` whose detail contains every fragment."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status
    assert {"type", "title", "detail"} <= problem.keys()
    for fragment in fragments:
        assert fragment in problem["detail"], problem
    return problem
