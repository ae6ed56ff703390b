"""Prompt preparation: a plan's records become templated `PreparedPrompt`s, with hygiene.

The records and their order come from `selection.py` (the prompt list and `sample_id`), the rules
that skip a prompt from `hygiene.py`, the templating from `templating.py` (in this process or a
pool of workers, below). Never more candidates are taken than could still be kept, so the
source is read exactly as far as a one-at-a-time loop would read it.
"""

from __future__ import annotations

import itertools
import json
import logging
import multiprocessing
import os
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_synth.contract.row import PreparedPrompt
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.prompts.hygiene import REJECT_REASONS, PromptChecks, Reject
from eagle3_synth.prompts.selection import Candidate, PromptPlan, candidates
from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer
from eagle3_synth.prompts.forms import MessageForm

# The model's vocabulary size, and whether a tokenizer belongs to the model: one place for both.
#
# Every id of a row must be a row of the model's embedding, `0 <= id < vocab_size`: a trainer looks
# each one up (an id past the table is an index error on a GPU, or garbage). The size is the model
# config's `vocab_size` (the embedding rows; it may exceed `len(tokenizer)`: Qwen3's 151,936 rows hold
# 151,669 tokens) where the model folder has a config.json with one, else `len(tokenizer)` (the
# replay engine with a tokenizer-only folder). `run.generate` records it and where it came from in
# the run's meta (`vocab_size`), which `build` copies into `<config>/run_info.json`, so `validate` and
# `publish` check a folder without the model.
#
# A tokenizer from another model templates prompts the model reads as other words, and the ids it
# generates may not be tokens of the tokenizer at all (the tiny model with the Qwen3 fixture
# tokenizer: output ids up to 2,041 against 1,536 tokens). `check_model_and_tokenizer` refuses that
# before anything is generated, naming both folders and what differs:
# - `len(tokenizer)` over the model's `vocab_size` (prompt ids the model has no embedding for);
# - a special token id of the model's config.json / generation_config.json (`bos_token_id`,
#   `eos_token_id`, `pad_token_id`; an int or a list) that is not the tokenizer's id for that token,
#   or, where the tokenizer has no such token, no token of the tokenizer at all. The two files are
#   read together (the union of their ids per name): models list several end ids in one of them
#   (Llama-3.1 instruct), or a chat bos only in generation_config.json (DeepSeek-R1 distills);
# - where the model folder has its own tokenizer files and `--tokenizer` points elsewhere, the two
#   tokenizers' vocabularies or special tokens differing.

SPECIAL_TOKENS = ("bos", "eos", "pad")
# Files that make a folder hold a tokenizer of its own (transformers reads one of them).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "tiktoken.model", "vocab.json")
# Where a size was read; no path, so a published run_info.json names no local folder.
CONFIG_SIZE = "vocab_size of the model's config.json"
TOKENIZER_SIZE = "len(tokenizer): no config.json with a vocab_size"
# Vocabulary differences quoted in a message.
_SHOWN = 3


@dataclass(frozen=True)
class ModelVocab:
    """How many ids the model has, and where that was read (for messages and the run's meta)."""

    size: int
    source: str  # CONFIG_SIZE or TOKENIZER_SIZE: which folder it names is the run's meta (model, tokenizer)

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "from": self.source}


def model_vocab(model: str | None, tokenizer: Any) -> ModelVocab:
    """The model config's `vocab_size` where `model` is a folder with a config.json that has one,
    else `len(tokenizer)`."""
    size = model_config_value(model, "vocab_size", "a model folder whose config.json is valid JSON")
    if size is not None:
        return ModelVocab(size, CONFIG_SIZE)
    return ModelVocab(len(tokenizer), TOKENIZER_SIZE)


def _config_special_ids(model: str) -> dict[str, set[int]]:
    """bos/eos/pad ids of the model's config.json and generation_config.json, per name (both files' ids)."""
    found: dict[str, set[int]] = {}
    for name in ("config.json", "generation_config.json"):
        for section in model_config_sections(model, "a model folder whose configs are valid JSON", name):
            for token in SPECIAL_TOKENS:
                value = section.get(f"{token}_token_id")
                values = value if isinstance(value, list) else [value]
                ids = {v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0}
                if ids:
                    found.setdefault(token, set()).update(ids)
    return found


def _special_token_problems(model: str, tokenizer: Any) -> list[str]:
    problems = []
    for token, ids in _config_special_ids(model).items():
        own = getattr(tokenizer, f"{token}_token_id", None)
        shown = next(iter(ids)) if len(ids) == 1 else sorted(ids)
        if own is not None and own not in ids:
            problems.append(f"the model's {token}_token_id is {shown}, the tokenizer's {token}_token "
                            f"{getattr(tokenizer, f'{token}_token', None)!r} is {own}")
        elif own is None and max(ids) >= len(tokenizer):
            problems.append(f"the model's {token}_token_id {shown} is no token of the tokenizer ({len(tokenizer)} tokens)")
    return problems


def _special_map(tokenizer: Any) -> dict[str, Any]:
    return {f"{token}_token": getattr(tokenizer, f"{token}_token", None) for token in (*SPECIAL_TOKENS, "unk")}


def tokenizer_differences(ours: Any, theirs: Any) -> list[str]:
    """How tokenizer `ours` differs from `theirs`: vocabulary (size, ids of tokens), special tokens."""
    problems = []
    if len(ours) != len(theirs):
        problems.append(f"{len(ours)} tokens against the model's tokenizer's {len(theirs)}")
    vocab, other = ours.get_vocab(), theirs.get_vocab()
    if vocab != other:
        differing = sorted(t for t in vocab.keys() | other.keys() if vocab.get(t) != other.get(t))
        shown = ", ".join(f"{t!r} is {vocab.get(t)} against {other.get(t)}" for t in differing[:_SHOWN])
        problems.append(f"{len(differing)} tokens have other ids ({shown}{', ...' if len(differing) > _SHOWN else ''})")
    mine, model = _special_map(ours), _special_map(theirs)
    problems += [f"{name} {mine[name]!r} against the model's tokenizer's {model[name]!r}"
                 for name in mine if mine[name] != model[name]]
    return problems


def _own_tokenizer(model: str, tokenizer_path: str | None) -> bool:
    """Whether the model folder holds a tokenizer of its own other than the one at `tokenizer_path`."""
    folder = Path(model)
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        return False
    return tokenizer_path is None or not Path(tokenizer_path).is_dir() or folder.resolve() != Path(tokenizer_path).resolve()


def check_model_and_tokenizer(model: str | None, tokenizer_path: str | None, tokenizer: Any, *,
                              trust_remote_code: bool = False) -> ModelVocab:
    """The model's `ModelVocab`, after refusing (one-line ConfigError naming both folders) a tokenizer
    that does not belong to the model (see the module doc). Reads only small JSON files and, where
    --tokenizer is not the model's own, the model's tokenizer: the weights are not touched."""
    vocab = model_vocab(model, tokenizer)
    if not model or not Path(model).is_dir():
        return vocab
    problems = []
    if len(tokenizer) > vocab.size:
        problems.append(f"the tokenizer has {len(tokenizer)} tokens, more than the vocab_size of "
                        f"{Path(model) / 'config.json'} ({vocab.size})")
    problems += _special_token_problems(model, tokenizer)
    if _own_tokenizer(model, tokenizer_path):
        own = load_tokenizer(model, trust_remote_code=trust_remote_code, option="--model")
        differences = tokenizer_differences(tokenizer, own)
        if differences:
            problems.append(f"it is not the model folder's own tokenizer ({', '.join(differences)})")
    if problems:
        raise ConfigError(f"the tokenizer {tokenizer_path} does not belong to the model {model}: {'; '.join(problems)}. "
                          "Pass the model's own tokenizer (--tokenizer), or none to use the model folder's")
    return vocab


# Who templates prompts: this process, or a pool of worker processes beside it for large lists.
#
# Conversations are templated in chunks (rendered one by one, encoded in one batched call, see
# `templating.ChatTokenizer.prompt_ids_batch`). Reading, conversion and every hygiene decision stay
# in the caller's process, in prompt-list order, so the prompt list, the rejects and the sample ids
# are the same with any number of workers.

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


# Rejects logged one by one; the rest are counted in the summary line and listed in rejects.jsonl.
LOGGED_REJECTS = 20
# Conversations templated per batch: amortises the tokenizer call and a worker round trip.
CHUNK = 64


@dataclass(frozen=True)
class Preparation:
    """How prompts are prepared in this process: none of it changes the prompt list."""

    # The first reject stops the run (PromptError) instead of being skipped.
    strict: bool = False
    # Processes that template (see `make_templater`): 1, N, or None for automatic.
    workers: int | None = None
    # Where worker processes load the tokenizer from, and whether its own code may run.
    tokenizer_path: str = ""
    trust_remote_code: bool = False
    # Where the rejects file is written, for the log line that points at it.
    rejects_file: str = "rejects.jsonl"
    # What `max_prompt_tokens` is, for a `too_long` reject's detail.
    too_long_reason: str = "the model's context minus max_new_tokens"


def model_config_sections(folder: str | Path | None, option: str, name: str = "config.json") -> list[dict[str, Any]]:
    """A model folder's `name` (config.json, generation_config.json) and its `text_config` /
    `language_config` (where multimodal models like Kimi-K2.5 keep the language model's values), in
    that order; empty without the file. An unreadable file is a ConfigError pointing at `option`."""
    if not folder or not (Path(folder) / name).is_file():
        return []
    try:
        config = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{folder}/{name} is not valid JSON ({exc}); pass {option}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{folder}/{name} is not a JSON object; pass {option}")
    nested = (config.get("text_config"), config.get("language_config"))
    return [config, *(section for section in nested if isinstance(section, dict))]


def model_config_value(folder: str | Path | None, key: str, option: str) -> int | None:
    """A positive int `key` of a model folder's config.json (also nested, `model_config_sections`);
    None without one. An unreadable config.json is a ConfigError pointing at `option`, the way to
    give the value instead."""
    for section in model_config_sections(folder, option):
        value = section.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def model_context_length(*folders: str | None) -> int | None:
    """`max_position_embeddings` from the first folder's config.json that has one; None if unknown."""
    for folder in folders:
        value = model_config_value(folder, "max_position_embeddings", "--max-context")
        if value is not None:
            return value
    return None


def max_prompt_tokens(context_length: int | None, max_new_tokens: int) -> int | None:
    """Longest prompt that leaves room for `max_new_tokens`; None when the context is unknown."""
    if context_length is None:
        return None
    if context_length <= max_new_tokens:
        raise ConfigError(f"the model's context ({context_length} tokens, --max-context) leaves no room for prompts "
                          f"with --max-new-tokens {max_new_tokens}")
    return context_length - max_new_tokens


def writable(text: str) -> str:
    """`text` with any lone surrogate as its `\\udXXX` escape: a reject's source id or detail may
    carry one from the record (or a file name from the command line), and rejects.jsonl is UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


Checked = list[tuple[Candidate, "Conversation | Reject"]]


def _templated(
    source: Iterator[Candidate], checks: PromptChecks, templater: Templater, cap: int | None,
    kept: Callable[[], int],
) -> Iterator[tuple[Candidate, Conversation | Reject, list[int] | PromptError | None]]:
    """(candidate, conversation or reject, ids) in prompt-list order, templated ahead: one chunk at
    a time in this process, four chunks per worker in a pool (enough to keep every worker busy).

    Never more candidates are taken than could still be kept (`cap` minus those kept), so the
    source is read exactly as far as a one-at-a-time loop would read it.
    """
    in_flight: deque[tuple[Checked, Result]] = deque()
    ahead = 0
    exhausted = False
    while True:
        while not exhausted:
            window = CHUNK if templater.workers == 1 else CHUNK * 4 * templater.workers
            room = window - ahead if cap is None else min(window - ahead, cap - kept() - ahead)
            if room <= 0:
                break
            checked: Checked = []
            for candidate in itertools.islice(source, min(CHUNK, room)):
                try:
                    checked.append((candidate, checks.precheck(candidate)))
                except Reject as reject:
                    checked.append((candidate, reject))
            if not checked:
                exhausted = True
                break
            in_flight.append((checked, templater.submit([c for _, c in checked if isinstance(c, Conversation)])))
            ahead += len(checked)
        if not in_flight:
            return
        checked, result = in_flight.popleft()
        ahead -= len(checked)
        ids = iter(result())
        for candidate, item in checked:
            yield candidate, item, next(ids) if isinstance(item, Conversation) else None


def iter_prepared_prompts(
    plan: PromptPlan, chat: ChatTokenizer, rejects: list[dict[str, Any]], *,
    max_prompt_tokens: int | None = None, preparation: Preparation = Preparation(), whole: bool = False,
) -> Iterator[PreparedPrompt]:
    """The config's kept prompts in prompt-list order, until `cap` are kept (see module doc),
    appending each rejected one to `rejects` as it is met; with `whole`, each the opening prompt
    of its whole conversation, which it keeps as its `script` (`turns.opening`).

    A stream, so that a run writes prompts.jsonl as it goes and never holds the whole prompt list
    (hundreds of MB of Python ints for 100,000 prompts). The summary is logged at the end.
    """
    cap = plan.cap
    checks = PromptChecks(chat, max_prompt_tokens, preparation.too_long_reason)
    kept = 0
    templater = make_templater(preparation.workers, chat, preparation.tokenizer_path, preparation.trust_remote_code)
    try:
        for candidate, item, ids in _templated(candidates(plan, cap, whole=whole), checks, templater, cap, lambda: kept):
            try:
                if isinstance(item, Reject):
                    raise item
                prompt = checks.accept(candidate, item, ids)
            except Reject as reject:
                detail = str(reject)
                message = writable(detail if detail.startswith(candidate.where) else f"{candidate.where}: {detail}")
                if preparation.strict:
                    raise PromptError(f"{message} (--strict stops at the first rejected prompt)") from None
                if len(rejects) < LOGGED_REJECTS:
                    log.warning("skipping prompt (%s): %s", reject.reason, message)
                rejects.append({"sample_id": candidate.sample_id, "source_id": writable(candidate.source_id),
                                "reason": reject.reason, "detail": message})
                continue
            kept += 1
            yield prompt
    finally:
        templater.close()
    log.info("%s", prompt_report(plan.config.name, kept, rejects, cap))
    if len(rejects) > LOGGED_REJECTS:
        log.warning("%d more rejected prompts are listed with their reasons in %s",
                    len(rejects) - LOGGED_REJECTS, preparation.rejects_file)


def prepare_prompts(
    plan: PromptPlan, chat: ChatTokenizer, *, max_prompt_tokens: int | None = None,
    preparation: Preparation = Preparation(),
) -> tuple[list[PreparedPrompt], list[dict[str, Any]]]:
    """`iter_prepared_prompts` as lists: (kept prompts, rejects)."""
    rejects: list[dict[str, Any]] = []
    prepared = list(iter_prepared_prompts(plan, chat, rejects, max_prompt_tokens=max_prompt_tokens,
                                          preparation=preparation))
    return prepared, rejects


def prompt_report(config: str, kept: int, rejects: list[dict[str, Any]], cap: int | None) -> str:
    """One line: prompts kept, rejects by reason, and whether the cap was reached."""
    counts = Counter(reject["reason"] for reject in rejects)
    reasons = ", ".join(f"{reason}={counts[reason]}" for reason in REJECT_REASONS if counts[reason])
    short = f"; the source ran out before the cap of {cap}" if cap is not None and kept < cap else ""
    return (f"{config}: {kept} prompts kept of {kept + len(rejects)} records considered"
            f"{'; rejected: ' + reasons if reasons else ''}{short}")
