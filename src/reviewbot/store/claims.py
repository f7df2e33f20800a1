"""Claims with a term (deliveries, review jobs): what a claimer hears when it lost one.

A claim names its holder and lasts until its term; the holder renews it while it works. A
holder whose term lapsed may find its work taken over by another claimer: from then on the
work is that claimer's, and the first one's result is refused where it would be written.
"""

from __future__ import annotations

from reviewbot.core.errors import Refused


class ClaimLost(Refused):
    """The claim passed to another claimer: this holder's result is not written."""

    code = "claim_lost"
