"""The service's parts as builders: every part is started after what it needs, stopped in
a declared order, and a wiring mistake is an error, not a part silently left out."""

from __future__ import annotations

import pytest

from reviewbot.service import BUILDERS, BUILDERS_BY_NAME, STOP_ORDER, Builder, start_order


async def _nothing(service: object) -> None:
    return None


def test_every_part_is_named_once_and_waits_only_for_parts_that_exist() -> None:
    names = [b.name for b in BUILDERS]
    assert len(names) == len(set(names))
    for builder in BUILDERS:
        for name in (*builder.needs, *builder.after):
            assert name in BUILDERS_BY_NAME, f"{builder.name} waits for unknown {name}"


def test_every_part_that_can_be_stopped_has_its_place_in_the_stop_order() -> None:
    stoppable = {b.name for b in BUILDERS if b.stop is not None}
    assert stoppable == set(STOP_ORDER)
    assert len(STOP_ORDER) == len(set(STOP_ORDER))


def test_the_start_order_puts_each_part_after_everything_it_waits_for() -> None:
    order = [b.name for b in start_order(BUILDERS)]
    assert sorted(order) == sorted(BUILDERS_BY_NAME)
    for builder in BUILDERS:
        for name in (*builder.needs, *builder.after):
            assert order.index(name) < order.index(builder.name), (builder.name, name)
    # The merger that queues a moved head is built before the review part, whose drainer
    # wakes its automerger; the inline merger after it, to review a moved head itself.
    assert order.index("queued_merge") < order.index("review") < order.index("inline_merge")


def test_a_new_part_is_one_more_row_placed_by_what_it_needs() -> None:
    queue = Builder("queue", _nothing, needs=("leases", "workers"))
    order = [b.name for b in start_order((queue, *BUILDERS))]
    assert order.index("queue") > max(order.index("leases"), order.index("workers"))


def test_a_cycle_or_an_unknown_part_is_a_wiring_error() -> None:
    a = Builder("a", _nothing, needs=("b",))
    b = Builder("b", _nothing, after=("a",))
    with pytest.raises(ValueError, match="wait for each other"):
        start_order((a, b))
    with pytest.raises(ValueError, match="'c', which is no part"):
        start_order((Builder("a", _nothing, needs=("c",)),))
