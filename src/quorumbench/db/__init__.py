"""Persistence: SQLAlchemy 2 models, engines (SQLite by default, PostgreSQL), migrations."""

# The tables of asks live in their own module (``models.py`` stays under 600 lines);
# importing it with the package puts them on ``Base.metadata`` with the rest.
import quorumbench.db.ask_models  # noqa: F401
