"""Merge: the one merge path at the approved head (the merger) and automerge."""
