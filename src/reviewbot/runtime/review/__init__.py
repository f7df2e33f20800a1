"""Review: the pipeline from an eligible head to a recorded verdict, the outbox drainer
that turns it into a native review, the PR state comment, and the reconcile sweep."""
