"""Persistence: SQLAlchemy 2 models, engines (SQLite by default, PostgreSQL), migrations."""
