"""The simulated world is deterministic per seed and honours link policies and cuts."""

from epochkraft.sim.world import LinkPolicy, World


def run(seed: int) -> list[tuple[int, int]]:
    world = World(seed, LinkPolicy(min_delay_ms=1, max_delay_ms=50, drop=0.2, duplicate=0.2))
    received: list[tuple[int, int]] = []
    for i in range(100):
        world.at(i, lambda i=i: world.send("a", "b", lambda i=i: received.append((world.now_ms, i))))
    world.run_until(1000)
    return received


def test_same_seed_same_schedule():
    assert run(7) == run(7)
    assert run(7) != run(8)


def test_loss_and_duplication_happen_and_reordering_is_possible():
    received = run(3)
    ids = [i for _, i in received]
    assert len(set(ids)) < 100  # some dropped
    assert len(ids) != len(set(ids))  # some duplicated
    assert ids != sorted(ids)  # reordered by random delays


def test_cut_links_drop_in_both_directions_until_healed():
    world = World(1)
    got: list[str] = []
    world.partition("a", "b")
    world.send("a", "b", lambda: got.append("ab"))
    world.send("b", "a", lambda: got.append("ba"))
    world.send("a", "c", lambda: got.append("ac"))
    world.run_until(100)
    assert got == ["ac"]
    world.heal()
    world.send("a", "b", lambda: got.append("ab"))
    world.run_until(200)
    assert got == ["ac", "ab"]


def test_a_one_way_cut_drops_one_direction_until_healed():
    world = World(1)
    got: list[str] = []
    world.partition_one_way("a", "b")
    world.send("a", "b", lambda: got.append("ab"))
    world.send("b", "a", lambda: got.append("ba"))
    world.run_until(100)
    assert got == ["ba"]
    world.heal_one_way("a", "b")
    world.send("a", "b", lambda: got.append("ab"))
    world.run_until(200)
    assert got == ["ba", "ab"]


def test_events_at_the_same_time_run_in_insertion_order():
    world = World(1)
    order: list[int] = []
    for i in range(10):
        world.at(5, lambda i=i: order.append(i))
    world.run_until(5)
    assert order == list(range(10))


def test_a_nodes_timer_keeps_its_earliest_deadline_and_stops_with_the_node():
    world = World(1)
    fired: list[tuple[str, int]] = []
    world.wake("a", 50, lambda: fired.append(("a", world.now_ms)))
    world.wake("a", 80, lambda: fired.append(("late", world.now_ms)))  # later than the armed one: kept
    world.wake("a", 30, lambda: fired.append(("early", world.now_ms)))  # earlier: replaces it
    world.wake("b", 40, lambda: fired.append(("b", world.now_ms)))
    world.cancel_wake("b")  # b stopped
    world.run_until(100)
    assert fired == [("early", 30)]
    world.wake("a", 20, lambda: fired.append(("past", world.now_ms)))  # the armed one passed: armed anew
    world.run_until(200)
    assert fired == [("early", 30), ("past", 100)]
