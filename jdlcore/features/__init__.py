"""Features of x that a model learns beside its law: the missing-value rule (``missing``), the boosted
summaries (``summaries``, trained by ``boosting``) and the view that reads x rows through both (``view``)."""
