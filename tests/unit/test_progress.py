"""Progress lines: one per item, or throttled to one per interval plus always the last."""

from __future__ import annotations

from reviewbot.progress import Progress


def test_every_item_gets_a_line_without_an_interval() -> None:
    lines: list[str] = []
    progress = Progress("replay", 3, write=lines.append)
    for name in ("a", "b", "c"):
        progress.advance(f"{name}: eligible")
    assert lines == [
        "replay [1/3] a: eligible",
        "replay [2/3] b: eligible",
        "replay [3/3] c: eligible",
    ]


def test_an_interval_throttles_but_the_last_line_always_shows() -> None:
    lines: list[str] = []
    now = [0.0]
    progress = Progress("sweep", 12, write=lines.append, min_interval_s=5.0, clock=lambda: now[0])
    for n in range(12):
        now[0] = n * 1.0  # one item per second
        progress.advance(f"item {n}")
    assert lines == [
        "sweep [ 6/12] item 5",
        "sweep [11/12] item 10",
        "sweep [12/12] item 11",
    ]
    assert progress.done == 12 and progress.lines == 3


def test_a_fast_operation_prints_only_its_last_line_or_nothing_when_asked() -> None:
    lines: list[str] = []
    progress = Progress("sweep", 3, write=lines.append, min_interval_s=5.0, clock=lambda: 0.0)
    for n in range(3):
        progress.advance(f"item {n}")
    assert lines == ["sweep [3/3] item 2"]
    quiet: list[str] = []
    progress = Progress(
        "sweep", 3, write=quiet.append, min_interval_s=5.0, clock=lambda: 0.0, only_if_slow=True
    )
    for n in range(3):
        progress.advance(f"item {n}")
    assert quiet == []
