"""queue_predict: which queued entries and trains a planned change would overlap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reviewbot.core.queue import (
    ROOT_KEY,
    SERIAL_KEY,
    KeyRules,
    Overlap,
    QueuedEntry,
    entry_keys,
    keys_overlap,
    queue_predict,
)

RULES = KeyRules(groups=(("src/api/*", "api"), ("src/*", "core")), serial_paths=("poetry.lock",))
QUEUED = (
    QueuedEntry(11, frozenset({"api"}), "1"),
    QueuedEntry(12, frozenset({"docs"}), "2"),
    QueuedEntry(13, frozenset({"api", "web"}), "landing"),
    QueuedEntry(14, frozenset({SERIAL_KEY}), "3"),
    QueuedEntry(15, frozenset({"core"}), "4"),
)


def test_a_change_overlaps_the_entries_sharing_its_keys_and_their_trains() -> None:
    prediction = queue_predict(["src/api/views.py", "README.md"], RULES, QUEUED)
    assert prediction.keys == tuple(sorted({"api", ROOT_KEY}))
    assert not prediction.serial and not prediction.independent
    assert prediction.entries == (
        Overlap(11, "1", ("api",)),
        Overlap(13, "landing", ("api",)),
        Overlap(14, "3", (SERIAL_KEY,)),  # a serial entry overlaps everything
    )
    assert prediction.trains == ("1", "landing", "3")


def test_path_groups_decide_the_key_first_match_wins() -> None:
    prediction = queue_predict(["src/db.py"], RULES, QUEUED)
    assert [o.number for o in prediction.entries] == [14, 15]


def test_a_change_touching_a_serial_path_overlaps_every_entry() -> None:
    prediction = queue_predict(["poetry.lock"], RULES, QUEUED)
    assert prediction.serial
    assert [o.number for o in prediction.entries] == [11, 12, 13, 14, 15]


def test_a_disjoint_change_is_independent() -> None:
    queued = tuple(e for e in QUEUED if e.number != 14)
    prediction = queue_predict(["cli/main.py"], RULES, queued)
    assert prediction.independent and prediction.trains == () and prediction.keys == ("cli",)
    assert queue_predict([], RULES, QUEUED).independent  # no files touch nothing


AREAS = st.sampled_from(["a/x.py", "b/y.py", "c/z.py", "poetry.lock", "top.md"])


@settings(max_examples=150, deadline=None)
@given(st.lists(AREAS, max_size=4), st.lists(st.lists(AREAS, max_size=3), max_size=8))
def test_an_entry_is_predicted_exactly_when_its_keys_overlap(
    files: list[str], others: list[list[str]]
) -> None:
    queued = [
        QueuedEntry(n, entry_keys(paths, RULES), str(n % 3)) for n, paths in enumerate(others)
    ]
    prediction = queue_predict(files, RULES, queued)
    mine = entry_keys(files, RULES)
    expected = [e.number for e in queued if keys_overlap(mine, e.keys)]
    assert [o.number for o in prediction.entries] == expected
    assert set(prediction.trains) == {e.train for e in queued if e.number in expected}
