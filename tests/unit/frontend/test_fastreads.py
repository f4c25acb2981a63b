"""The short way's routes must be the app's: a fast route the app serves otherwise, or not at
all, stops the frontend from starting."""

from __future__ import annotations

import pytest

from tether.frontend.api import jobs, tasks
from tether.frontend.app import ROUTERS
from tether.frontend.fastreads import FAST_ROUTES, FastRoute, bind_fast_routes

ROUTES = [route for router in ROUTERS for route in router.routes]


def test_every_fast_route_is_bound_to_the_apps_route_of_its_path() -> None:
    bound = bind_fast_routes(ROUTES)
    assert [b.route.path for b in bound] == [fast.path for fast in FAST_ROUTES]


@pytest.mark.parametrize(
    "fast",
    [
        FastRoute("/v1/jobs/{ent}/{job}", tasks.list_tasks),  # another endpoint
        FastRoute("/v1/jobs/{ent}/{job}/status", jobs.get_job),  # no such route
    ],
)
def test_a_fast_route_the_app_does_not_serve_that_way_is_refused(fast: FastRoute) -> None:
    with pytest.raises(ValueError, match=fast.path.replace("{", r"\{").replace("}", r"\}")):
        bind_fast_routes(ROUTES, [fast])
