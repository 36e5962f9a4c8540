"""UnknownTasks: the tasks a worker's claims pass over, each for a while."""

from tenure.worker.unknown import UnknownTasks


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_that_met_no_unknown_task__passes_nothing_over() -> None:
    assert UnknownTasks(Clock()).passed_over() == ()


def test_a_task_is_passed_over_for_its_wait_then_looked_at_again() -> None:
    clock = Clock()
    unknown = UnknownTasks(clock)
    unknown.pass_over("new", 2.0)
    unknown.pass_over("newer", 0.5)
    assert set(unknown.passed_over()) == {"new", "newer"}
    clock.now += 1.0
    assert unknown.passed_over() == ("new",)
    clock.now += 1.0
    assert unknown.passed_over() == ()


def test_a_shorter_wait_asked_later__does_not_cut_a_longer_one() -> None:
    clock = Clock()
    unknown = UnknownTasks(clock)
    unknown.pass_over("new", 8.0)
    unknown.pass_over("new", 0.5)  # another job of it, handed back for the first time
    clock.now += 4.0
    assert unknown.passed_over() == ("new",)
