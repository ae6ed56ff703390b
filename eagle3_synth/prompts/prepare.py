"""Prompt preparation: a config's records become templated `PreparedPrompt`s, with hygiene.

Where the records come from (`PromptSelection`):
- a prepared prompts file (`--prompts`, or the config's bundled samples): lines in file order;
- local files in the source's own schema (`--source-file`, repeatable) or the config's dataset read
  with `datasets` streaming (`--from-source`): each record is converted by the config's adapter.

The prompt list and `sample_id`:
- prepared prompts file: `sample_id` is the line index;
- source records: records are put in a seeded order -- record number `p` of the source (counting
  from 0 across the files or dataset configs, in the order given) sorts by
  `blake2b(f"{seed}:{p}")` -- and `sample_id` is the rank in that order. It depends only on the
  source's contents, its order and the seed: the same record gets the same `sample_id` for every
  model, tokenizer and `max_new_tokens`, in every run and on every shard.
Records are taken in that order until `cap` prompts are kept (`--limit`; for a source, the config's
cap by default). A rejected record keeps its `sample_id` and leaves a gap, so nothing is renumbered.
A prompt's `source_id` is the record's id column (`id`, `uuid`, `prompt_id`, per adapter) or, for
sources without one (Glaive, Mixture-of-Thoughts, OpenThoughts), where it was read: `file.json#12`,
`file.jsonl:13` (a line) or `all/train#5` (dataset config/split and row).

Hygiene (each reject is counted by reason, logged, and written to `rejects.jsonl` with its
`sample_id`, source id, reason and detail; `--strict` makes the first one fatal):
- `unparseable`: the record (or prompts line) cannot be read or converted;
- `control_token`: message text contains one of the tokenizer's control tokens (`<|im_end|>`,
  `<think>`...), which templating would turn into the real control token;
- `tools_not_rendered`: the conversation has tools, but the chat template does not render `tools`
  and the model family documents no system-prompt tool description (the model would not see them);
- `template_error`: the chat template refuses the conversation in the message form probed for it
  (`template_forms.py`);
- `too_long`: more prompt tokens than the model's context minus `max_new_tokens`;
- `duplicate`: the same prompt ids as an earlier kept prompt (hash of the templated ids).

Selecting from a source reads it once (twice in the rare case that many of the first candidates
are rejected), holding only about 2 x cap converted conversations, never the whole source.

Speed: conversations are templated in chunks (rendered one by one, encoded in one batched call,
see `chat.ChatTokenizer.prompt_ids_batch`), and for large prompt lists by a pool of worker
processes. Reading, conversion and every hygiene decision stay in this process, in prompt-list
order, and never more candidates are taken than could still be kept, so the prompt list, the
rejects and the sample ids are the same with any number of workers.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import logging
import multiprocessing
import os
import re
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer
from eagle3_synth.prompts.conversation import Conversation, check_messages, read_prompts_jsonl
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.contract.row import PreparedPrompt
from eagle3_synth.prompts.adapters import get_adapter
from eagle3_synth.prompts.readers import SourceRecord, iter_dataset, iter_source_files
from eagle3_synth.prompts.forms import MessageForm

if TYPE_CHECKING:
    from eagle3_synth.run.generate import GenerateOptions

log = logging.getLogger(__name__)

REJECT_REASONS = ("unparseable", "control_token", "tools_not_rendered", "template_error", "too_long", "duplicate")
# Bump when a hygiene rule changes what is kept, so old runs are not mixed with new prompt lists.
# 2: message forms probed per template, tools_not_rendered.
HYGIENE_VERSION = 2
# Rejects logged one by one; the rest are counted in the summary line and listed in rejects.jsonl.
LOGGED_REJECTS = 20
# Conversations templated per batch: amortises the tokenizer call and a worker round trip.
CHUNK = 64
# `workers=None` moves to a pool of one worker per core (up to the maximum) only after this many
# prompts: a worker's start-up (importing transformers, loading the tokenizer) costs seconds, which
# on 2 cores made a pool slower than this process alone for 11,000 prompts and 1.5x faster for
# 88,000 (BENCHMARKS.md, "Prompt preparation").
POOL_MIN_PROMPTS = 16_384
MAX_AUTO_WORKERS = 8


@dataclass(frozen=True)
class PromptSelection:
    """Where a config's records come from and how prompts are chosen from them.

    With neither `source_files` nor `from_source`, the prompts come from the prepared prompts file
    (`GenerateOptions.prompts_file`).
    """

    # Local files in the source's own schema (.jsonl, .json, .parquet), read in this order.
    source_files: tuple[str, ...] = ()
    # Read the config's dataset (Hub id or local dataset folder) with datasets streaming.
    from_source: bool = False
    # Dataset revision (tag, branch, commit) for `from_source`; None = the default branch.
    revision: str | None = None
    # Seed of the selection order (not the sampling seed: new outputs for the same prompts).
    seed: int = 0
    # Read at most this many source records (a quick trial on a large dataset).
    scan_limit: int | None = None
    # The model's context length; prompts longer than it minus max_new_tokens are skipped.
    context_length: int | None = None
    # Processes that template prompts: 1 = this process only; N = a pool of N workers; None = this
    # process, moving to a pool of one worker per core after POOL_MIN_PROMPTS prompts. It never
    # changes the prompt list (see the module doc), so it is not part of the run's fingerprint.
    workers: int | None = None

    @property
    def reads_source(self) -> bool:
        return bool(self.source_files) or self.from_source


@dataclass(frozen=True)
class Candidate:
    """A record in prompt-list order, converted (or the reason it could not be)."""

    sample_id: int
    where: str  # for messages: `file:line (sample_id N)`
    source_id: str
    item: Conversation | PromptError


class Reject(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


# -- identity ----------------------------------------------------------------------------------------

def model_context_length(*folders: str | None) -> int | None:
    """`max_position_embeddings` from the first folder's config.json that has one (also nested in
    `text_config`/`language_config`, as multimodal models like Kimi-K2.5 keep it); None if unknown."""
    for folder in folders:
        if not folder or not (Path(folder) / "config.json").is_file():
            continue
        try:
            config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ConfigError(f"{folder}/config.json is not valid JSON ({exc}); pass --max-context") from None
        for section in (config, config.get("text_config") or {}, config.get("language_config") or {}):
            value = section.get("max_position_embeddings")
            if isinstance(value, int) and value > 0:
                return value
    return None


def max_prompt_tokens(options: "GenerateOptions") -> int | None:
    """Longest prompt that leaves room for `max_new_tokens`; None when the context is unknown."""
    context = options.selection.context_length
    if context is None:
        return None
    if context <= options.max_new_tokens:
        raise ConfigError(f"the model's context ({context} tokens, --max-context) leaves no room for prompts "
                          f"with --max-new-tokens {options.max_new_tokens}")
    return context - options.max_new_tokens


def effective_cap(options: "GenerateOptions") -> int | None:
    """`--limit`, else the config's cap for a source; a prepared prompts file is used whole."""
    if options.limit is not None:
        return options.limit
    return options.config.cap if options.selection.reads_source else None


def prompt_source_identity(options: "GenerateOptions") -> dict[str, Any]:
    """Everything that decides the prompt list, for the run fingerprint."""
    from eagle3_synth.run.generate import file_digest

    selection = options.selection
    identity: dict[str, Any] = {
        "cap": effective_cap(options),
        "max_prompt_tokens": max_prompt_tokens(options),
        "hygiene": HYGIENE_VERSION,
    }
    if not selection.reads_source:
        return {"file": file_digest(Path(options.prompts_file)), **identity}
    spec = options.config
    adapter = get_adapter(spec.adapter)
    identity.update(adapter=adapter.name, adapter_version=adapter.version, seed=selection.seed,
                    scan_limit=selection.scan_limit)
    if selection.source_files:
        for path in selection.source_files:
            if not Path(path).is_file():
                raise ConfigError(f"--source-file {path}: no such file")
        identity["source_files"] = [[Path(p).name, file_digest(Path(p))] for p in selection.source_files]
    else:
        if not spec.source:
            raise ConfigError(f"config {spec.name} has no source dataset; pass --source-file FILE or --prompts FILE")
        identity["dataset"] = {"source": spec.source, "configs": list(spec.source_configs), "split": spec.split,
                               "data_files": list(spec.data_files), "revision": selection.revision}
    return identity


# -- candidates in prompt-list order ---------------------------------------------------------------

def selection_key(seed: int, position: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{position}".encode(), digest_size=8).digest(), "big")


def _convert(record: SourceRecord, convert: Callable[[Any], Conversation], id_of: Callable[[Any], str]
             ) -> tuple[str, str, Conversation | PromptError]:
    """(locator, source id, conversation or error) of one source record."""
    if record.error is not None:
        return record.locator, record.locator, PromptError(record.error)
    source_id = id_of(record.record) or record.locator
    try:
        conversation = convert(record.record)
        check_messages(conversation.messages, "converted record")
    except PromptError as exc:
        return record.locator, source_id, exc
    return record.locator, source_id, Conversation(conversation.messages, conversation.tools, source_id)


def seeded_candidates(
    read: Callable[[], Iterable[SourceRecord]],
    convert: Callable[[Any], Conversation],
    id_of: Callable[[Any], str],
    seed: int,
    pool: int,
) -> Iterator[Candidate]:
    """Records in seeded order (see the module doc), converted, lazily.

    One pass keeps the `pool` records with the smallest keys (converting only those that enter the
    pool). Should the consumer want more than the pool holds, the source is read again with a pool
    four times larger; ranks are global, so the second pass continues where the first stopped.
    """
    given = 0
    while True:
        heap: list[tuple[int, int, Any]] = []  # (-key, -position, converted): the max on top
        total = 0
        for position, record in enumerate(read()):
            total += 1
            key = selection_key(seed, position)
            if len(heap) < pool:
                heapq.heappush(heap, (-key, -position, _convert(record, convert, id_of)))
            elif (key, position) < (-heap[0][0], -heap[0][1]):
                heapq.heapreplace(heap, (-key, -position, _convert(record, convert, id_of)))
        ordered = sorted(heap, reverse=True)
        for rank in range(given, len(ordered)):
            locator, source_id, item = ordered[rank][2]
            yield Candidate(rank, f"{locator} (sample_id {rank})", source_id, item)
            given = rank + 1
        if total <= pool:
            return
        pool *= 4


def file_candidates(path: str) -> Iterator[Candidate]:
    """Lines of a prepared prompts file, in order; `sample_id` = line index."""
    for sample_id, item in read_prompts_jsonl(path):
        where = f"{path}:{sample_id + 1} (sample_id {sample_id})"
        source_id = item.source_id if isinstance(item, Conversation) else ""
        yield Candidate(sample_id, where, source_id, item)


def candidates(options: "GenerateOptions", cap: int | None) -> Iterator[Candidate]:
    selection = options.selection
    if not selection.reads_source:
        return file_candidates(options.prompts_file)
    spec = options.config
    adapter = get_adapter(spec.adapter)

    def read() -> Iterator[SourceRecord]:
        if selection.source_files:
            records = iter_source_files(selection.source_files)
        else:
            records = iter_dataset(spec.source, split=spec.split, configs=spec.source_configs,
                                   data_files=spec.data_files, columns=spec.columns, revision=selection.revision)
        return itertools.islice(records, selection.scan_limit)

    pool = 2 * cap + 64 if cap is not None else 1 << 62
    return seeded_candidates(read, adapter.convert, adapter.source_id, selection.seed, pool)


# -- hygiene ---------------------------------------------------------------------------------------

def control_tokens(tokenizer: Any) -> list[str]:
    """The tokenizer's special tokens plus `<...>` added tokens (Qwen's `<think>`, `<tool_call>`):
    strings that templating turns into control tokens wherever they appear in message text."""
    tokens = {token.content for token in tokenizer.added_tokens_decoder.values()
              if token.special or (token.content.startswith("<") and token.content.endswith(">"))}
    return sorted((t for t in tokens if t.strip()), key=len, reverse=True)


def rendered_texts(conversation: Conversation) -> Iterator[tuple[str, str]]:
    """(where, text) of every string a template renders from the conversation."""
    for i, message in enumerate(conversation.messages):
        if isinstance(message.get("content"), str):
            yield f"messages[{i}]", message["content"]
        if message.get("tool_calls"):
            yield f"messages[{i}].tool_calls", json.dumps(message["tool_calls"], ensure_ascii=False)
    if conversation.tools:
        yield "tools", json.dumps(conversation.tools, ensure_ascii=False)


class PromptChecks:
    """The hygiene rules, split around templating: `precheck` before (unparseable, control tokens),
    `accept` after (template error, too long, duplicate). Each raises `Reject`."""

    def __init__(self, chat: ChatTokenizer, max_prompt_tokens: int | None):
        self.chat = chat
        self.max_prompt_tokens = max_prompt_tokens
        tokens = control_tokens(chat.tokenizer)
        self.control = re.compile("|".join(map(re.escape, tokens))) if tokens else None
        self.seen: dict[bytes, int] = {}

    def precheck(self, candidate: Candidate) -> Conversation:
        if isinstance(candidate.item, PromptError):
            raise Reject("unparseable", str(candidate.item))
        conversation = candidate.item
        if conversation.tools and not self.chat.form.tools_visible:
            raise Reject("tools_not_rendered", f"the chat template does not render tools and this model family "
                         f"documents no system-prompt tool description: the model would not see its "
                         f"{len(conversation.tools)} tool(s)")
        if self.control is not None:
            for where, text in rendered_texts(conversation):
                match = self.control.search(text)
                if match:
                    raise Reject("control_token", f"{where} contains {match.group(0)!r}, which the tokenizer "
                                                  "reads as a control token")
        return conversation

    def accept(self, candidate: Candidate, conversation: Conversation, ids: list[int] | PromptError) -> PreparedPrompt:
        if isinstance(ids, PromptError):
            form = self.chat.form
            raise Reject("template_error", f"{ids} (message form: content {form.call_content}, arguments "
                                           f"{form.arguments})")
        if self.max_prompt_tokens is not None and len(ids) > self.max_prompt_tokens:
            raise Reject("too_long", f"{len(ids)} prompt tokens > {self.max_prompt_tokens} "
                                     "(the model's context minus max_new_tokens)")
        digest = hashlib.blake2b(array("q", ids).tobytes(), digest_size=16).digest()
        first = self.seen.setdefault(digest, candidate.sample_id)
        if first != candidate.sample_id:
            raise Reject("duplicate", f"same prompt ids as sample_id {first}")
        return PreparedPrompt(sample_id=candidate.sample_id, source_id=candidate.source_id, prompt_ids=ids,
                              messages=conversation.messages, tools=conversation.tools)


# -- templating: in this process or in a pool of workers ---------------------------------------------

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

    Each worker loads the tokenizer from its path. The first result is compared with this process's
    own templating, and should the workers disagree or die, templating falls back to this process,
    with a warning: never a different id.
    """

    def __init__(self, chat: ChatTokenizer, workers: int, tokenizer_path: str, trust_remote_code: bool):
        self.local = LocalTemplater(chat)
        self.workers = workers
        self.pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
            initargs=(tokenizer_path, trust_remote_code, chat.template_kwargs, chat.form.to_json(), chat.template_date))
        self.checked = False

    def submit(self, conversations: list[Conversation]) -> Result:
        if self.pool is None or not conversations:
            return self.local.submit(conversations)
        future = self.pool.submit(_template_in_worker, conversations)

        def result() -> list[list[int] | PromptError]:
            if self.pool is None:
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

        return result

    def _fall_back(self, why: str, conversations: list[Conversation]) -> list[list[int] | PromptError]:
        log.warning("templating prompts in this process only: %s", why)
        self.close()
        return self.local.submit(conversations)()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


class AutoTemplater:
    """In this process for small prompt lists; past `POOL_MIN_PROMPTS` conversations, moves on to
    a pool of one worker per core (up to MAX_AUTO_WORKERS), where there is more than one core.

    Deciding by what has been templated so far (not by the cap) keeps a small source or prompts
    file, and the test suite, free of worker start-up."""

    def __init__(self, chat: ChatTokenizer, cores: int, tokenizer_path: str, trust_remote_code: bool):
        self.current: LocalTemplater | PoolTemplater = LocalTemplater(chat)
        self.pool_args = (chat, min(cores, MAX_AUTO_WORKERS), tokenizer_path, trust_remote_code)
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


def make_templater(options: "GenerateOptions", chat: ChatTokenizer) -> Templater:
    """Who templates, from `PromptSelection.workers` (see there)."""
    workers = options.selection.workers
    if workers is None:
        return AutoTemplater(chat, _available_cores(), options.tokenizer_path, options.trust_remote_code)
    if workers < 1:
        raise ConfigError(f"prompt preparation workers must be >= 1, got {workers}")
    if workers == 1:
        return LocalTemplater(chat)
    log.info("templating prompts in %d worker processes", workers)
    return PoolTemplater(chat, workers, options.tokenizer_path, options.trust_remote_code)


# -- the prompt list -----------------------------------------------------------------------------------

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
    options: "GenerateOptions", chat: ChatTokenizer, rejects: list[dict[str, Any]]
) -> Iterator[PreparedPrompt]:
    """The config's kept prompts in prompt-list order, until `cap` are kept (see module doc),
    appending each rejected one to `rejects` as it is met.

    A stream, so that a run writes prompts.jsonl as it goes and never holds the whole prompt list
    (hundreds of MB of Python ints for 100,000 prompts). The summary is logged at the end.
    """
    cap = effective_cap(options)
    checks = PromptChecks(chat, max_prompt_tokens(options))
    kept = 0
    templater = make_templater(options, chat)
    try:
        for candidate, item, ids in _templated(candidates(options, cap), checks, templater, cap, lambda: kept):
            try:
                if isinstance(item, Reject):
                    raise item
                prompt = checks.accept(candidate, item, ids)
            except Reject as reject:
                detail = str(reject)
                message = detail if detail.startswith(candidate.where) else f"{candidate.where}: {detail}"
                if options.strict:
                    raise PromptError(f"{message} (--strict stops at the first rejected prompt)") from None
                if len(rejects) < LOGGED_REJECTS:
                    log.warning("skipping prompt (%s): %s", reject.reason, message)
                rejects.append({"sample_id": candidate.sample_id, "source_id": candidate.source_id,
                                "reason": reject.reason, "detail": message})
                continue
            kept += 1
            yield prompt
    finally:
        templater.close()
    log.info("%s", prompt_report(options.config.name, kept, rejects, cap))
    if len(rejects) > LOGGED_REJECTS:
        log.warning("%d more rejected prompts are listed with their reasons in %s/rejects.jsonl",
                    len(rejects) - LOGGED_REJECTS, options.run_dir)


def prepare_prompts(
    options: "GenerateOptions", chat: ChatTokenizer
) -> tuple[list[PreparedPrompt], list[dict[str, Any]]]:
    """`iter_prepared_prompts` as lists: (kept prompts, rejects)."""
    rejects: list[dict[str, Any]] = []
    prepared = list(iter_prepared_prompts(options, chat, rejects))
    return prepared, rejects


def prompt_report(config: str, kept: int, rejects: list[dict[str, Any]], cap: int | None) -> str:
    """One line: prompts kept, rejects by reason, and whether the cap was reached."""
    counts = Counter(reject["reason"] for reject in rejects)
    reasons = ", ".join(f"{reason}={counts[reason]}" for reason in REJECT_REASONS if counts[reason])
    short = f"; the source ran out before the cap of {cap}" if cap is not None and kept < cap else ""
    return (f"{config}: {kept} prompts kept of {kept + len(rejects)} records considered"
            f"{'; rejected: ' + reasons if reasons else ''}{short}")
