from types import SimpleNamespace

from quorumbench.queue.sql import SqlTaskQueue
from quorumbench.services.leases import runs_inline


def test_the_hot_path_runs_inline_on_sqlite_with_the_sql_queue_only():
    sql_queue = SqlTaskQueue.__new__(SqlTaskQueue)  # no database needed to ask its type
    other_queue = object()
    assert runs_inline(SimpleNamespace(db=SimpleNamespace(dialect="sqlite"), queue=sql_queue))
    assert not runs_inline(SimpleNamespace(db=SimpleNamespace(dialect="sqlite"), queue=other_queue))
    assert not runs_inline(
        SimpleNamespace(db=SimpleNamespace(dialect="postgresql"), queue=sql_queue)
    )
