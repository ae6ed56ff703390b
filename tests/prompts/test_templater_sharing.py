"""A worker pool shares templating with this process: it never idles waiting for a worker.

Workers take a second or more to start (imports, tokenizer). While this process waits for a chunk,
it templates the last submitted chunk no worker has taken yet; once the workers are checked, a chunk
it asks for that no worker has started is templated here. The pool's executor is replaced by one
whose futures only finish when the test says so (workers "still starting"), so each decision is
seen; the ids are always those of this process's own templating. A busy worker answers once this
process waits for it (`WorkerFuture.answer`), never after a time: however slowly this process
templates on a loaded machine, the worker is the slower one.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future

from eagle3_synth.prompts import templaters
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.templating import ChatTokenizer

from ..conftest import KIMI_TOKENIZER

CHUNKS = [[Conversation([{"role": "user", "content": f"question {chunk}.{i}: what is {chunk} + {i}?"}])
           for i in range(3)] for chunk in range(5)]


class WorkerFuture(Future):
    """A chunk's future; with `answer` set (a worker took the chunk and templates it), that answer
    is its result once this process waits for it (`result`): this process did all it could first."""

    answer = None

    def result(self, timeout=None):
        if self.answer is not None and not self.done():
            self.set_result(self.answer(self.conversations))
        return super().result(timeout)


class StartingPool:
    """An executor whose workers have not started: futures stay pending until the test sets them."""

    def __init__(self) -> None:
        self.futures: list[WorkerFuture] = []
        self.shut_down = False

    def submit(self, fn, conversations):
        future = WorkerFuture()
        future.conversations = conversations
        self.futures.append(future)
        return future

    def take(self, i: int) -> WorkerFuture:
        """A worker takes future i (it can no longer be cancelled)."""
        assert self.futures[i].set_running_or_notify_cancel()
        return self.futures[i]

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self.shut_down = True


def pool_templater(chat: ChatTokenizer) -> tuple[templaters.PoolTemplater, StartingPool]:
    templater = templaters.PoolTemplater(chat, 1, str(KIMI_TOKENIZER), False)
    templater.pool.shutdown()  # never submitted to: no process was started
    templater.pool = fake = StartingPool()
    return templater, fake


def test_while_waiting_for_a_worker_this_process_templates_the_chunks_no_worker_took(kimi_tokenizer):
    chat = ChatTokenizer(kimi_tokenizer)
    expected = [chat.prompt_ids_batch(chunk) for chunk in CHUNKS]
    templater, pool = pool_templater(chat)
    assert templater.workers == 2  # this process templates too: prompt preparation keeps more ahead
    results = [templater.submit(chunk) for chunk in CHUNKS]
    first = pool.take(0)  # the first worker is busy with chunk 0 and answers once it is waited for
    first.answer = chat.prompt_ids_batch
    assert results[0]() == expected[0]  # the worker's answer, checked against this process's
    assert templater.checked
    assert [f.cancelled() for f in pool.futures] == [False, True, True, True, True]
    assert [r() for r in results[1:]] == expected[1:]


def test_once_checked_a_chunk_no_worker_started_is_templated_here(kimi_tokenizer):
    chat = ChatTokenizer(kimi_tokenizer)
    templater, pool = pool_templater(chat)
    templater.checked = True
    results = [templater.submit(chunk) for chunk in CHUNKS[:3]]
    taken = pool.take(1)
    taken.set_result(chat.prompt_ids_batch(CHUNKS[1]))
    assert [r() for r in results] == [chat.prompt_ids_batch(chunk) for chunk in CHUNKS[:3]]
    assert [f.cancelled() for f in pool.futures] == [True, False, True]


def test_a_stolen_chunk_survives_the_workers_disagreeing(kimi_tokenizer, qwen_tokenizer, caplog):
    chat = ChatTokenizer(kimi_tokenizer)
    templater, pool = pool_templater(chat)
    results = [templater.submit(chunk) for chunk in CHUNKS[:3]]
    first = pool.take(0)
    other = ChatTokenizer(qwen_tokenizer)  # a worker with another tokenizer gives other ids
    first.answer = other.prompt_ids_batch  # once waited for: chunks 1 and 2 were templated here by then
    with caplog.at_level(logging.WARNING):
        got = [r() for r in results]
    assert "the workers' templating differs from this process's" in caplog.text
    assert got == [chat.prompt_ids_batch(chunk) for chunk in CHUNKS[:3]]
    assert [f.cancelled() for f in pool.futures] == [False, True, True], "chunks 1 and 2 were stolen"
    assert pool.shut_down and templater.pool is None


def test_auto_pools_leave_a_core_for_this_process(kimi_tokenizer, monkeypatch):
    chat = ChatTokenizer(kimi_tokenizer)
    for cores, workers in ((2, 1), (4, 3), (64, templaters.MAX_AUTO_WORKERS)):
        auto = templaters.AutoTemplater(chat, cores, str(KIMI_TOKENIZER), False)
        assert auto.pool_args[1] == workers
    assert templaters.AutoTemplater(chat, 1, str(KIMI_TOKENIZER), False).templated is None  # never a pool
