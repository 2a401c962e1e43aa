"""The proxy's POP journal (rocketstore/proxy/popstate.py): what a restart reads back, and a
journal that stays small under a long stream of pops and acks."""
from __future__ import annotations

from rocketstore.proxy import popstate
from rocketstore.proxy.popstate import InFlight, PopState


def test_reopen_keeps_cursors_and_unacked_entries(tmp_path):
    path = str(tmp_path / "pop.journal")
    s = PopState(path)
    q = ("g", "t", "broker-a", 0)
    s.record_pops((q, 3), [((*q, i), InFlight(1000, 10**13, 1, 100 + i)) for i in range(3)])
    assert s.ack((*q, 1), 1000, now=2000) is None
    assert s.ack((*q, 1), 1000, now=2000) is not None            # acked twice: refused
    e = s.change_invisible((*q, 2), 1000, now=3000, visible_at=9000)
    assert not isinstance(e, str) and e.pop_time == 3000
    with open(path, "a") as f:
        f.write('{"op": "p", "k": ["g", "t"')                      # a torn last line
    s.close()
    r = PopState(path)
    assert r.cursors == {q: 3}
    assert sorted(r.inflight) == [(*q, 0), (*q, 2)]
    assert r.inflight[(*q, 2)].visible_at == 9000 and r.inflight[(*q, 2)].pop_time == 3000
    assert r.ack((*q, 2), 1000, now=4000) is not None             # the superseded handle
    r.close()


def test_the_journal_is_compacted_while_running(tmp_path, monkeypatch):
    monkeypatch.setattr(popstate, "COMPACT_MIN_LINES", 100)
    path = tmp_path / "pop.journal"
    s = PopState(str(path))
    q = ("g", "t", "broker-a", 0)
    for i in range(2000):
        s.record_pops((q, i + 1), [((*q, i), InFlight(1000, 10**13, 1, i))])
        if i % 10:
            assert s.ack((*q, i), 1000, now=2000) is None
    live = len(s.inflight) + len(s.cursors)
    assert live == 201
    assert len(path.read_text().splitlines()) <= 4 * live + 4
    s.close()
    r = PopState(str(path))
    assert sorted(k[4] for k in r.inflight) == list(range(0, 2000, 10))
    assert r.cursors == {q: 2000}
    r.close()


def test_queue_entries_are_the_queue_s_own_after_every_kind_of_change(tmp_path):
    """queue_entries reads a per-queue index (not a scan of every in-flight entry): it must
    match the table through pops, acks, nacks, drops and a replay."""
    path = str(tmp_path / "pop.journal")
    s = PopState(path)
    qa, qb = ("g", "t", "broker-a", 0), ("g", "t", "broker-a", 1)
    s.record_pops((qa, 4), [((*qa, i), InFlight(1000, 10**13, 1, i)) for i in range(4)])
    s.record_pops((qb, 2), [((*qb, i), InFlight(1000, 10**13, 1, 50 + i)) for i in range(2)])
    assert s.ack((*qa, 1), 1000, now=2000) is None
    s.change_invisible((*qa, 3), 1000, now=3000, visible_at=9000)
    s.drop((*qb, 0))
    s.drop((*qb, 1))

    def view(st: PopState) -> dict:
        return {q: [(o, e.pop_time, e.visible_at) for o, e in st.queue_entries(q)]
                for q in (qa, qb)}
    want = {qa: [(0, 1000, 10**13), (2, 1000, 10**13), (3, 3000, 9000)], qb: []}
    assert view(s) == want
    s.close()
    r = PopState(path)
    assert view(r) == want
    r.close()
