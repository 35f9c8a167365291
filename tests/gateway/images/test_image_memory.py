"""The per-process image memory budget (gateway/images/memory.py)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.images.memory import ImageMemoryBudget, ImageMemoryBusy


async def test_a_reservation_waits_for_room_and_gets_it_when_another_ends() -> None:
    budget = ImageMemoryBudget(100)
    first = await budget.reserve(80, wait_s=1)
    waiting = asyncio.ensure_future(budget.reserve(50, wait_s=5))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # 80 + 50 > 100
    first.shrink_to(30)  # downloads done: it holds less than its worst case
    second = await asyncio.wait_for(waiting, 1)
    assert budget.used == 80
    first.release()
    second.release()
    second.release()  # idempotent
    assert budget.used == 0


async def test_a_full_budget_refuses_after_the_wait() -> None:
    budget = ImageMemoryBudget(100)
    held = await budget.reserve(100, wait_s=0)
    with pytest.raises(ImageMemoryBusy):
        await budget.reserve(1, wait_s=0.05)
    assert budget.used == 100 and budget._waiters == []
    held.release()
    # One request larger than the whole budget still runs, alone.
    alone = await budget.reserve(10**9, wait_s=0)
    assert alone.size == 100
