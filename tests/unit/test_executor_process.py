"""The executor process's side, in this process: aborts of attempts it has
not read yet (no pipe is read or written here)."""

from tenure.worker.executors.child_main import ABORTS_KEPT, ExecutorProcess
from tenure.worker.executors.wire import Run


def run(job_id: str) -> Run:
    return Run(job_id, 1, "task", "default", 1, {}, None, None, False, False)


def test_an_abort_that_came_before_its_attempt__cancels_it_when_read():
    executor = ExecutorProcess(-1, -1, -1)
    executor.abort(("j", 1))
    assert executor.take(run("j")).cancelled
    assert not executor.take(run("k")).cancelled


def test_an_abort_of_an_attempt_being_run__cancels_it_at_once():
    executor = ExecutorProcess(-1, -1, -1)
    ctx = executor.take(run("j"))
    executor.abort(("j", 1))
    assert ctx.cancelled


def test_aborts_of_attempts_never_read__keep_only_the_newest():
    # An abort that crossed its attempt's end on the pipes is never taken.
    executor = ExecutorProcess(-1, -1, -1)
    sent = ABORTS_KEPT * 10
    for i in range(sent):
        executor.abort((f"ended-{i}", 1))
    assert executor.take(run(f"ended-{sent - ABORTS_KEPT}")).cancelled  # the oldest kept
    assert not executor.take(run(f"ended-{sent - ABORTS_KEPT - 1}")).cancelled
    assert not executor.take(run("ended-0")).cancelled
