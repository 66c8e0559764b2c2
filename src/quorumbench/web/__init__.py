"""Server-rendered pages for people (Jinja2 templates, our own CSS and JS, SVG charts).

``routes.py`` serves them live from the app; ``export.py`` writes the same pages as
a static site. Both read through ``services/`` only: the leaderboard from
``services.board``, every other page's view from ``services.views``.
"""
