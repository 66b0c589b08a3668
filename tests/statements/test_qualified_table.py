"""A schema-qualified, mixed-case table (the chat example) end to end."""

from __future__ import annotations

from dbcases import T0, MakeQueue, at


def test_chat_example_schema_qualified_mixed_case_table_end_to_end(
        queue: MakeQueue) -> None:
    q = queue("postgres", "chat")
    m = q.mod
    listener = q.connect(autocommit=True)
    listener.execute('LISTEN "OutgoingMessages"')
    conn = q.connect()
    m.insert_many(conn, [m.NewRow(conversation="c1", retry_after=at(-60), body=f"hi {i}")
                         for i in range(3)])
    m.insert(conn, m.NewRow(conversation="c2", retry_after=at(-60), body="other"))
    m.notify(conn, "c1")
    conn.commit()
    assert [(n.channel, n.payload) for n in listener.notifies(timeout=5, stop_after=1)] == [
        ("OutgoingMessages", "c1")]

    head = m.fifo_claim(conn, group="c1", now=T0, locked_until=at(30))
    conn.commit()
    assert head is not None and (head.body, head.attempt) == ("hi 0", 1)
    assert m.fifo_claim(conn, group="c1", now=at(1), locked_until=at(31)) is None
    conn.commit()
    assert m.renew(conn, id=head.MessageId, locked_until=at(30), attempt=1,
                   new_locked_until=at(60))
    assert m.retry_after(conn, id=head.MessageId, locked_until=at(60), attempt=1,
                         retry_after=at(100))
    conn.commit()

    bodies = []
    while (row := m.fifo_claim(conn, group="c1", now=at(2), locked_until=at(32))) is not None:
        conn.commit()
        bodies.append(row.body)
        if row.body == "hi 1" and row.attempt == 1:
            assert m.retry(conn, id=row.MessageId, locked_until=at(32), attempt=row.attempt)
        else:
            assert m.finish(conn, id=row.MessageId, locked_until=at(32), attempt=row.attempt)
        conn.commit()
    assert bodies == ["hi 1", "hi 1", "hi 2"]

    (other,) = m.claim(conn, group="c2", now=at(3), locked_until=at(33))
    conn.commit()
    assert m.finish(conn, id=other.MessageId, locked_until=at(33), attempt=0) is False
    assert m.finish(conn, id=other.MessageId, locked_until=at(33), attempt=other.attempt)
    conn.commit()
    assert [(r["conversation"], r["body"], r["attempt"]) for r in q.rows()] == [
        ("c1", "hi 0", 2)]
