"""Where each rank sits: stages of contiguous tensor-parallel ranks, layers split evenly."""

from __future__ import annotations

from engine.worker.distributed import RankPlace, place, rank_device


def test_ranks_are_laid_out_stage_by_stage() -> None:
    places = [RankPlace(rank, tp_size=2, pp_size=3) for rank in range(6)]
    assert [(p.stage, p.tp_rank) for p in places] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert [p.is_first_stage for p in places] == [True, True, False, False, False, False]
    assert [p.is_last_stage for p in places] == [False, False, False, False, True, True]
    assert places[1].next_rank == 3 and places[3].prev_rank == 1
    assert {p.last_stage_rank for p in places} == {4}
    assert [p.stage_layers(12) for p in places[::2]] == [range(0, 4), range(4, 8), range(8, 12)]


def test_one_rank_runs_every_layer() -> None:
    here = place()  # no process group in the test process
    assert (here.rank, here.world_size, here.is_first_stage, here.is_last_stage) == (0, 1, True, True)
    assert here.stage_layers(5) == range(5)


def test_each_rank_takes_the_gpu_of_its_local_rank() -> None:
    assert str(rank_device("cuda:2", 1)) == "cuda:3"
    assert str(rank_device("cpu", 3)) == "cpu"
