"""NOTIFY on PostgreSQL: an insert can wake listeners on the table's channel, after its commit."""

from __future__ import annotations

from dbcases import Layout, MakeQueue


def test_notify_reaches_a_listener_on_the_table_channel_with_the_group(
        queue: MakeQueue) -> None:
    q = queue("postgres", Layout(form="row_lock", group=True))
    listener = q.connect(autocommit=True)
    listener.execute('LISTEN "jobs"')
    conn = q.connect()
    q.mod.insert(conn, q.new(grp="emails"))
    q.mod.notify(conn, "emails")
    conn.commit()
    got = [(n.channel, n.payload) for n in listener.notifies(timeout=5, stop_after=1)]
    assert got == [("jobs", "emails")]


def test_notify_is_delivered_only_when_the_transaction_commits(queue: MakeQueue) -> None:
    q = queue("postgres", Layout(form="lease", group=True))
    listener = q.connect(autocommit=True)
    listener.execute('LISTEN "jobs"')
    conn = q.connect()
    q.mod.notify(conn, "g")
    assert list(listener.notifies(timeout=0.2, stop_after=1)) == []
    conn.rollback()
    assert list(listener.notifies(timeout=0.2, stop_after=1)) == []
    q.mod.notify(conn, "g")
    conn.commit()
    assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == ["g"]
