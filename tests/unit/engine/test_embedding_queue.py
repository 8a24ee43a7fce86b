"""How embedding batches are cut: oldest first, one model per batch, within the token budget."""

from __future__ import annotations

from engine.core.embedding_queue import EmbeddingJob, EmbeddingQueue


def ids(n: int) -> list[int]:
    return list(range(n))


def finish(batch: list[tuple[EmbeddingJob, int]]) -> None:
    for job, _ in batch:
        job.vectors.append([1.0])


def test_batches_respect_the_budget_and_the_model_of_the_oldest_job() -> None:
    q = EmbeddingQueue(max_batch_tokens=10)
    a = EmbeddingJob("a", "m1", [ids(4), ids(4), ids(4)])
    b = EmbeddingJob("b", "m2", [ids(2)])
    c = EmbeddingJob("c", "m1", [ids(2)])
    for job in (a, b, c):
        q.add(job)
    first = q.next_batch()
    assert [(j.request_id, i) for j, i in first] == [("a", 0), ("a", 1)]  # a third 4 would make 12
    finish(first)
    second = q.next_batch()
    assert [(j.request_id, i) for j, i in second] == [("a", 2), ("c", 0)]  # b is another model
    finish(second)
    assert [j.request_id for j in q.pop_done()] == ["a", "c"]
    third = q.next_batch()
    assert [(j.request_id, i) for j, i in third] == [("b", 0)]


def test_an_input_over_the_budget_runs_alone_and_remove_drops_a_job() -> None:
    q = EmbeddingQueue(max_batch_tokens=8)
    q.add(EmbeddingJob("big", "m", [ids(20), ids(1)]))
    q.add(EmbeddingJob("gone", "m", [ids(1)]))
    assert [(j.request_id, i) for j, i in q.next_batch()] == [("big", 0)]
    assert q.remove("gone") and "gone" not in q and not q.remove("gone")
