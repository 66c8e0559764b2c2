"""Persistence: SQLAlchemy 2 models, engines (SQLite by default, PostgreSQL), migrations."""

# The ask cache's tables (db/label_models.py) join Base.metadata for every reader of
# db/models.py (Alembic's env, create_all, the drift test): importing the package
# imports them, and label_models imports models first.
import quorumbench.db.label_models  # noqa: F401
