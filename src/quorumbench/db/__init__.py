"""Persistence: SQLAlchemy 2 models, engines (SQLite by default, PostgreSQL), migrations."""

# Tables kept out of models.py (it stays under 600 lines) join Base.metadata for every
# reader of db/models.py (Alembic's env, create_all, the drift test): importing the
# package imports them, and each of these modules imports models first.
import quorumbench.db.ask_models  # asks and public plans
import quorumbench.db.edge_models  # edge results
import quorumbench.db.idempotency_models  # the API's idempotency keys
import quorumbench.db.label_models  # the ask cache
import quorumbench.db.measurement_models  # the measurement cross-check per task
import quorumbench.db.pool_models  # credits and prize pools
import quorumbench.db.session_models  # noqa: F401  (sign-in sessions and form uses)
