"""What each page of the site shows, assembled from the services (no HTTP, no HTML).

``model`` (the model page), ``compare`` (two to four models side by side), ``tasks``
(the task list and one task with its samples) and ``runners`` (every runner's
contributions). The leaderboard page's rows come from ``services/board.py``. The web
routes render these views as HTML, JSON and CSV, and the static export writes them.
"""

FAILURES_SHOWN = 10
"""Failure reports a model or task page shows (the newest)."""
