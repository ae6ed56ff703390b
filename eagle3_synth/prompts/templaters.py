"""Who templates prompts: this process, or a pool of worker processes beside it for large lists.

Conversations are templated in chunks (rendered one by one, encoded in one batched call, see
`templating.ChatTokenizer.prompt_ids_batch`). Reading, conversion and every hygiene decision stay
in the caller's process, in prompt-list order, so the prompt list, the rejects and the sample ids
are the same with any number of workers.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
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
# which costs seconds of CPU to start (imports, tokenizer).
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


class PoolTemplater:
    """Templates chunks in worker processes (`spawn`: nothing of this process's state is shared).

    Each worker loads the tokenizer from its path. The first worker result is compared with this
    process's own templating, and should the workers disagree or die, templating falls back to this
    process, with a warning: never a different id.
    """

    def __init__(self, chat: ChatTokenizer, workers: int, tokenizer_path: str, trust_remote_code: bool):
        self.local = LocalTemplater(chat)
        # Processes at work, this one (reading, checking) included: how many chunks preparation keeps ahead.
        self.workers = workers + 1
        self.pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
            initargs=(tokenizer_path, trust_remote_code, chat.template_kwargs, chat.form.to_json(), chat.template_date))
        self.checked = False

    def submit(self, conversations: list[Conversation]) -> Result:
        if self.pool is None or not conversations:
            return self.local.submit(conversations)
        future = self.pool.submit(_template_in_worker, conversations)
        return lambda: self._result(future, conversations)

    def _result(self, future: Future, conversations: list[Conversation]) -> list[list[int] | PromptError]:
        if self.pool is None:  # fallen back: the workers are gone
            return self.local.submit(conversations)()
        try:
            results = future.result()
        except BrokenProcessPool as exc:
            return self._fall_back(f"a worker process failed ({exc})", conversations)
        if not self.checked and not isinstance(results[0], PromptError):
            self.checked = True
            if self.local.submit(conversations[:1])()[0] != results[0]:
                return self._fall_back("the workers' templating differs from this process's", conversations)
        return results

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
    core: this process reads and checks the prompts beside the workers, so it keeps a core.

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
                log.info("templating prompts in %d worker processes", self.pool_args[1])
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
    `tokenizer_path`); None = this process, then a pool of one worker per core but one after
    POOL_MIN_PROMPTS prompts. It never changes the prompt list."""
    if workers is None:
        return AutoTemplater(chat, _available_cores(), tokenizer_path, trust_remote_code)
    if workers < 1:
        raise ConfigError(f"prompt preparation workers must be >= 1, got {workers}")
    if workers == 1:
        return LocalTemplater(chat)
    log.info("templating prompts in %d worker processes", workers)
    return PoolTemplater(chat, workers, tokenizer_path, trust_remote_code)
