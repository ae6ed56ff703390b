"""Who templates prompts: this process, or a pool of worker processes beside it for large lists.

Conversations are templated in chunks (rendered one by one, encoded in one batched call, see
`templating.ChatTokenizer.prompt_ids_batch`). Reading, conversion and every hygiene decision stay
in the caller's process, in prompt-list order, so the prompt list, the rejects and the sample ids
are the same with any number of workers. With a pool, this process templates the chunks no worker
has taken yet whenever it would otherwise wait, so a worker's start-up costs no time.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.forms import MessageForm
from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer

log = logging.getLogger(__name__)

# `workers=None` moves to a pool of one worker per core but one (up to the maximum) only after
# this many prompts: keeps small prompt lists (and the test suite) free of worker processes, each of
# which costs seconds of CPU to start (imports, tokenizer). This process templates while the
# workers start, so a pool never waits on them and pays off from a few thousand prompts
# (benchmarks/README.md, "The whole `build` against a bare ... pass").
POOL_MIN_PROMPTS = 2_048
MAX_AUTO_WORKERS = 8

Result = Callable[[], list[list[int] | PromptError]]


class LocalTemplater:
    """Templates each chunk in this process, when asked for its result."""

    workers = 1

    def __init__(self, chat: ChatTokenizer):
        self.chat = chat

    def submit(self, conversations: list[Conversation]) -> Result:
        return lambda: self.chat.prompt_ids_batch(conversations)

    def close(self) -> None:
        pass


_worker_chat: ChatTokenizer | None = None


def _start_worker(tokenizer_path: str, trust_remote_code: bool, template_kwargs: dict[str, Any],
                  form: dict[str, Any], template_date: str | None) -> None:
    global _worker_chat
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the workers are the parallelism
    _worker_chat = ChatTokenizer(load_tokenizer(tokenizer_path, trust_remote_code=trust_remote_code), template_kwargs,
                                 form=MessageForm.from_json(form), template_date=template_date)


def _template_in_worker(conversations: list[Conversation]) -> list[list[int] | PromptError]:
    assert _worker_chat is not None, "worker started without its tokenizer"
    return _worker_chat.prompt_ids_batch(conversations)


class _Chunk:
    """A chunk handed to the pool: its conversations, the worker's future, and its ids if this
    process templated it instead."""

    __slots__ = ("conversations", "future", "here")

    def __init__(self, conversations: list[Conversation], future: Future):
        self.conversations, self.future = conversations, future
        self.here: list[list[int] | PromptError] | None = None


class PoolTemplater:
    """Templates chunks in worker processes (`spawn`: nothing of this process's state is shared),
    and in this process while it would otherwise wait for them.

    Each worker loads the tokenizer from its path. This process never idles on a worker: waiting for
    a chunk, it templates the last submitted chunk no worker has taken yet (workers take them from
    the front), and once the workers are checked it templates a chunk it asks for that no worker has
    started. So worker start-up (a second or more) costs no time, and the pool's work is shared with
    this process. The first worker result is compared with this process's own templating, and should
    the workers disagree or die, templating falls back to this process, with a warning: never a
    different id.
    """

    def __init__(self, chat: ChatTokenizer, workers: int, tokenizer_path: str, trust_remote_code: bool):
        self.local = LocalTemplater(chat)
        # Processes that template, this one included: how many chunks prompt preparation keeps ahead.
        self.workers = workers + 1
        self.pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
            initargs=(tokenizer_path, trust_remote_code, chat.template_kwargs, chat.form.to_json(), chat.template_date))
        self.checked = False
        self.queued: deque[_Chunk] = deque()  # submitted to the pool and not yet asked for, in order

    def submit(self, conversations: list[Conversation]) -> Result:
        if self.pool is None or not conversations:
            return self.local.submit(conversations)
        chunk = _Chunk(conversations, self.pool.submit(_template_in_worker, conversations))
        self.queued.append(chunk)
        return lambda: self._result(chunk)

    def _result(self, chunk: _Chunk) -> list[list[int] | PromptError]:
        self.queued.remove(chunk)  # normally the first: chunks are asked for in submission order
        if chunk.here is not None:
            return chunk.here
        if self.pool is None or (self.checked and chunk.future.cancel()):
            return self.local.submit(chunk.conversations)()
        while not chunk.future.done() and self._template_one_here():
            pass
        try:
            results = chunk.future.result()
        except BrokenProcessPool as exc:
            return self._fall_back(f"a worker process failed ({exc})", chunk.conversations)
        if not self.checked and not isinstance(results[0], PromptError):
            self.checked = True
            if self.local.submit(chunk.conversations[:1])()[0] != results[0]:
                return self._fall_back("the workers' templating differs from this process's", chunk.conversations)
        return results

    def _template_one_here(self) -> bool:
        """Template the last queued chunk no worker has taken in this process; False if none is left
        (the pool hands chunks to workers in order, so past one a worker took, all are taken)."""
        for chunk in reversed(self.queued):
            if chunk.here is not None:
                continue
            if not chunk.future.cancel():
                return False
            chunk.here = self.local.submit(chunk.conversations)()
            return True
        return False

    def _fall_back(self, why: str, conversations: list[Conversation]) -> list[list[int] | PromptError]:
        log.warning("templating prompts in this process only: %s", why)
        self.close()
        return self.local.submit(conversations)()

    def close(self) -> None:
        if self.pool is not None:
            # Not waiting: a worker still starting up exits once it has, while this process goes on.
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None


class AutoTemplater:
    """In this process for small prompt lists; past `POOL_MIN_PROMPTS` conversations, moves on to
    a pool of one worker per core but one (up to MAX_AUTO_WORKERS), where there is more than one
    core: this process templates beside the workers (`PoolTemplater`), so it keeps a core.

    Deciding by what has been templated so far (not by the cap) keeps a small source or prompts
    file, and the test suite, free of worker start-up."""

    def __init__(self, chat: ChatTokenizer, cores: int, tokenizer_path: str, trust_remote_code: bool):
        self.current: LocalTemplater | PoolTemplater = LocalTemplater(chat)
        self.pool_args = (chat, max(1, min(cores - 1, MAX_AUTO_WORKERS)), tokenizer_path, trust_remote_code)
        self.templated = 0 if cores > 1 else None  # None: one core, never a pool

    @property
    def workers(self) -> int:
        return self.current.workers

    def submit(self, conversations: list[Conversation]) -> Result:
        if self.templated is not None:
            self.templated += len(conversations)
            if self.templated >= POOL_MIN_PROMPTS:
                self.templated = None
                log.info("templating prompts in %d worker processes and this one", self.pool_args[1])
                self.current = PoolTemplater(*self.pool_args)
        return self.current.submit(conversations)

    def close(self) -> None:
        self.current.close()


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


Templater = LocalTemplater | PoolTemplater | AutoTemplater


def make_templater(workers: int | None, chat: ChatTokenizer, tokenizer_path: str, trust_remote_code: bool
                   ) -> Templater:
    """Who templates: 1 = this process only; N = a pool of N workers (each loads the tokenizer from
    `tokenizer_path`) beside this process; None = this process, joined by a pool of one worker per
    core but one after POOL_MIN_PROMPTS prompts. It never changes the prompt list."""
    if workers is None:
        return AutoTemplater(chat, _available_cores(), tokenizer_path, trust_remote_code)
    if workers < 1:
        raise ConfigError(f"prompt preparation workers must be >= 1, got {workers}")
    if workers == 1:
        return LocalTemplater(chat)
    log.info("templating prompts in %d worker processes and this one", workers)
    return PoolTemplater(chat, workers, tokenizer_path, trust_remote_code)
