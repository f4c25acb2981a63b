"""What a refused host profile deletion says about the profile's users."""

from __future__ import annotations

from tether.frontend.hostprofiles import ProfileUsers
from tether.frontend.problems import NAMES_SHOWN


def test_no_users_is_false_and_any_kind_of_user_is_true() -> None:
    assert not ProfileUsers([], [], [])
    assert ProfileUsers([], [], ["m1"])


def test_each_kind_is_named_and_a_long_list_is_cut_with_a_count() -> None:
    machines = [f"m{index:02}" for index in range(NAMES_SHOWN + 3)]
    users = ProfileUsers(entitlements=["ads"], carried_by=machines, targeted_by=[])
    shown = ", ".join(machines[:NAMES_SHOWN])
    assert users.describe() == f"entitlement(s) ads name it; machine(s) {shown} and 3 more carry it"
