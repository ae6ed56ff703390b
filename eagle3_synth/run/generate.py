"""The pipeline: prompts -> prompt ids -> engine -> journal, then journal -> dataset rows.

`generate` fills a run directory and can be re-run after any crash: it generates only samples
without a result. `iter_rows` turns a run directory into contract rows ordered by `sample_id`.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from eagle3_synth import __version__
from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer, today
from eagle3_synth.prompts.prepare import PromptSelection, iter_prepared_prompts, prompt_source_identity
from eagle3_synth.prompts.configs import ConfigSpec
from eagle3_synth.engines import EngineOptions, GenerationRequest, SamplingParams, create_engine
from eagle3_synth.engines.base import check_sampling
from eagle3_synth.errors import ConfigError, EngineError
from eagle3_synth.run.journal import JournalIndex, RunDirectory, Shard, kill_point
from eagle3_synth.contract.profiles import MarkerIds, ModelProfile, choose_profile, resolve_markers
from eagle3_synth.run.progress import MAX_LISTED, Coverage, Progress, RunSummary
from eagle3_synth.contract.row import dumps_messages, dumps_tools, make_row

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerateOptions:
    """What determines a run's output, plus how to run it (engine settings)."""

    config: ConfigSpec
    tokenizer_path: str
    prompts_file: str | None  # prepared prompts; None when `selection` reads a source
    run_dir: str
    engine: str
    engine_options: EngineOptions
    profile: str = "auto"
    limit: int | None = None
    max_new_tokens: int = 10_240
    temperature: float = 0.6
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = 0
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    # YAML of the user's own model profiles (profiles.py); `profile` may then name one.
    profile_file: str | None = None
    # The date a date-writing template (gpt-oss) renders as today: YYYY-MM-DD; None = the one the
    # run directory recorded, else today (UTC) -- recorded, so a resume templates the same ids.
    template_date: str | None = None
    trust_remote_code: bool = False
    strict: bool = False
    retry_errors: bool = False
    # Where prompts come from when not a prepared prompts file (see prompts.prepare.PromptSelection).
    selection: PromptSelection = PromptSelection()
    # How this process runs (not part of the fingerprint: they do not change any output).
    shard: Shard = Shard()
    max_hours: float | None = None

    def __post_init__(self) -> None:
        # Checked here, before any prompt is prepared, so a typo fails in a second, not after hours.
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit must be >= 1, got {self.limit}")
        check_sampling(self.max_new_tokens, self.temperature, self.top_p)


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def tokenizer_identity(path: str) -> dict[str, str]:
    """Digests of the files that define tokenization, so a changed template changes the run."""
    folder = Path(path)
    names = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
             "special_tokens_map.json", "tokenizer.model", "tiktoken.model")
    if not folder.is_dir():
        return {"name": path}
    return {name: file_digest(folder / name) for name in names if (folder / name).is_file()}


def model_identity(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    folder = Path(path)
    if not folder.is_dir():
        return {"name": path}
    identity: dict[str, Any] = {"name": folder.name}
    if (folder / "config.json").is_file():
        identity["config.json"] = file_digest(folder / "config.json")
    identity["weights"] = sorted(
        (p.name, p.stat().st_size) for p in folder.iterdir() if p.suffix in (".safetensors", ".bin")
    )
    return identity


def fingerprint_fields(options: GenerateOptions, profile: ModelProfile, chat: ChatTokenizer) -> dict[str, Any]:
    """Everything that determines the output ids (engine plumbing such as URLs is left out)."""
    return {
        "config": options.config.name,
        "prompts": prompt_source_identity(options),
        "model": model_identity(options.engine_options.model) if options.engine != "replay" else {},
        "replay": file_digest(Path(options.engine_options.replay_file)) if options.engine == "replay" else None,
        "tokenizer": tokenizer_identity(options.tokenizer_path),
        "template_kwargs": {**options.config.template_kwargs, **options.template_kwargs},
        "profile": profile.name,
        "profile_definition": profile.to_json(),
        # How conversations are handed to the template (probed from it) and the date it renders.
        "template": {"message_form": chat.form.to_json(), "date": chat.template_date},
        "sampling": {
            "max_new_tokens": options.max_new_tokens,
            "temperature": options.temperature,
            "top_p": options.top_p,
            "top_k": options.top_k,
            "seed": options.seed,
        },
    }



def recorded_template_date(run: RunDirectory) -> str | None:
    """The template date a run directory was started with (None for a new run or a dateless one)."""
    if not run.exists():
        return None
    return (run.read_run_file()["fields"].get("template") or {}).get("date")


def _sampling_params(options: GenerateOptions, markers: MarkerIds) -> SamplingParams:
    return SamplingParams(
        max_new_tokens=options.max_new_tokens,
        temperature=options.temperature,
        stop_token_ids=markers.stop_ids,
        top_p=options.top_p,
        top_k=options.top_k,
        seed=options.seed,
    )


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (a scheduler's preemption notice, `kill`) stops like Ctrl-C: the journal is closed
    on the way out -- on an object store that uploads the open segment -- and the run resumes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _pending(run: RunDirectory, index: JournalIndex, options: GenerateOptions, summary: RunSummary) -> set[int]:
    """This shard's sample_ids still to generate; counts the rest into the summary."""
    shard = options.shard
    ids = run.prompt_ids()
    ids = ids[ids % shard.count == shard.index]
    positions = index.positions(ids)
    has_result = positions >= 0
    failed = np.zeros(len(ids), dtype=bool)
    failed[has_result] = ~index.ok[positions[has_result]]
    skip = has_result & ~(failed & options.retry_errors)
    summary.rejected = sum(1 for reject in run.iter_rejects() if shard.owns(reject["sample_id"]))
    summary.prompts = len(ids) + summary.rejected
    summary.already_done = int((skip & ~failed).sum())
    summary.failed_before = int((skip & failed).sum())
    return set(ids[~skip].tolist())


def _requests(
    run: RunDirectory, todo: set[int], deadline: float | None, summary: RunSummary
) -> Iterator[GenerationRequest]:
    """Requests for `todo`, read lazily from prompts.jsonl (never all prompt ids in memory);
    past the deadline no new request is handed out, so the engine drains and the run stops."""
    for prompt in run.iter_prompts(keep=todo.__contains__):
        if deadline is not None and time.monotonic() >= deadline:
            summary.stopped = "deadline"
            return
        yield GenerationRequest(prompt.sample_id, prompt.prompt_ids)


def _absolute(path: str | None) -> str | None:
    """Local paths are recorded absolute so that tools run from elsewhere find the tokenizer."""
    if path is None or "://" in path or not Path(path).exists():
        return path
    return str(Path(path).resolve())


def library_versions(engine: str) -> dict[str, str]:
    """Versions of what produced the ids, for the dataset card (engine packages only if used)."""
    from importlib.metadata import PackageNotFoundError, version

    names = ["transformers", "tokenizers", "torch", "datasets"]
    if engine.startswith("sglang"):
        names.append("sglang")
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def generate(options: GenerateOptions, *, progress_stream: TextIO | None = None) -> RunSummary:
    """Journal a result for every prompt of the shard that has none yet (or only errors, with
    `retry_errors`); stop handing out prompts at `max_hours`. Safe to re-run after any crash."""
    started = time.monotonic()
    deadline = None if options.max_hours is None else started + options.max_hours * 3600
    tokenizer = load_tokenizer(options.tokenizer_path, trust_remote_code=options.trust_remote_code,
                               option="--tokenizer" if options.tokenizer_path != options.engine_options.model else "--model")
    profile, why = choose_profile(options.profile, tokenizer, options.profile_file)
    log.info("profile %s (%s)", profile.name, why)
    markers = resolve_markers(profile, tokenizer)
    run = RunDirectory(options.run_dir)
    chat = ChatTokenizer(tokenizer, {**options.config.template_kwargs, **options.template_kwargs},
                         profile=profile, template_date=options.template_date or recorded_template_date(run) or today())
    if chat.probe is not None and not chat.probe.faithful:
        log.warning("this chat template renders no assistant tool call as given (%s); conversations with tool "
                    "history will be %s", "; ".join(chat.probe.lines()),
                    "rejected" if not chat.probe.renders_calls else "templated in the closest form")
    run_fingerprint = run.claim(
        fingerprint_fields(options, profile, chat),
        meta={
            "markers": markers.to_json(),
            "message_probe": chat.probe.outcomes if chat.probe else None,
            "engine": options.engine,
            "model": _absolute(options.engine_options.model),
            "tokenizer": _absolute(options.tokenizer_path),
            "trust_remote_code": options.trust_remote_code,
            "template_kwargs": {**options.config.template_kwargs, **options.template_kwargs},
            "eagle3_synth_version": __version__,
            "versions": library_versions(options.engine),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    kill_point("run.claimed")
    if not run.prompts_ready:
        rejects: list[dict[str, Any]] = []  # filled as the prompts stream into prompts.jsonl
        run.write_prompts(iter_prepared_prompts(options, chat, rejects), rejects)
    kill_point("prompts.ready")

    summary = RunSummary(config=options.config.name, run_dir=options.run_dir, shard=str(options.shard))
    todo = _pending(run, run.scan(run_fingerprint), options, summary)
    if todo:
        engine = create_engine(options.engine, options.engine_options)
        progress = Progress(summary, total=summary.prompts - summary.rejected,
                            done=summary.already_done + summary.failed_before, engine=engine, stream=progress_stream)
        requests = _requests(run, todo, deadline, summary)
        try:
            with _sigterm_interrupts(), run.open_journal(run_fingerprint, options.shard) as journal:
                for result in engine.generate(requests, _sampling_params(options, markers)):
                    if result.sample_id not in todo:
                        raise EngineError(f"engine {options.engine} returned sample_id {result.sample_id}, "
                                          "which was not asked for or was already returned")
                    todo.discard(result.sample_id)
                    journal.append(result)
                    progress.update(result)
        except KeyboardInterrupt:
            summary.stopped = "interrupted"
        finally:
            engine.close()
            progress.close()
    summary.remaining = len(todo)
    summary.seconds = time.monotonic() - started
    return summary


def iter_rows(run_dir: str, markers: MarkerIds | None = None) -> Iterator[dict[str, Any]]:
    """Contract rows of a run directory in sample_id order, exactly one per generated sample.

    Works while a run is still generating (unfinished samples are left out, failed ones too).
    Memory holds the journal index (about 25 bytes a sample) and one sample at a time.
    """
    with RunDirectory(run_dir).local_copy() as run:
        markers = markers or run.markers()
        index = run.scan()
        if not len(index.sample_ids):
            return
        has_row = index.ok

        def keep(sample_id: int) -> bool:
            position = index.position(sample_id)
            return position >= 0 and bool(has_row[position])

        with index.reader(run.fs) as read:
            for prompt in run.iter_prompts(keep=keep):
                result = read(index.position(prompt.sample_id))
                kill_point("assemble.row")
                yield make_row(
                    sample_id=prompt.sample_id,
                    source_id=prompt.source_id,
                    prompt_ids=prompt.prompt_ids,
                    output_ids=result["output_ids"],
                    finish_reason=result["finish_reason"],
                    messages_json=dumps_messages(prompt.messages),
                    tools_json=dumps_tools(prompt.tools),
                    markers=markers,
                )


def no_rows_message(run_dir: str, config: str, coverage: Coverage, out: str) -> str:
    """Why a config has nothing to write: the rejects by reason and the failed samples."""
    counts = Counter(reject["reason"] for reject in RunDirectory(run_dir).iter_rejects())
    rejected = ", ".join(f"{reason}={n}" for reason, n in counts.most_common()) or "none"
    return (f"{config}: no row to write ({coverage.prompts} prompts kept, rejected: {rejected}; "
            f"{coverage.finish_reasons.get('abort', 0)} failed): nothing written to {out}, whose other configs "
            f"stay loadable. Each rejected prompt is listed with its reason in {run_dir}/rejects.jsonl")


def check_run(run_dir: str, config: str) -> Coverage:
    """What the run directory holds for `config`: results, failures, samples still missing."""
    run = RunDirectory(run_dir)
    recorded = run.read_run_file()["fields"].get("config")
    if recorded != config:
        raise ConfigError(f"run directory {run_dir} holds config {recorded!r}, not {config!r}")
    if not run.prompts_ready:
        raise ConfigError(f"run directory {run_dir} has no prepared prompts yet; run generate (or build with --model) first")
    index = run.scan()
    ids = run.prompt_ids()
    positions = index.positions(ids)
    found = positions[positions >= 0]
    failed: list[str] = []
    with index.reader(run.fs) as read:
        for position in found[~index.ok[found]][:MAX_LISTED].tolist():
            result = read(position)
            failed.append(f"sample_id {result['sample_id']}: {result.get('error') or 'aborted by the engine'}")
    return Coverage(
        config=config,
        run_dir=run_dir,
        prompts=len(ids),
        rejected=sum(1 for _ in run.iter_rejects()),
        finish_reasons=index.finish_reasons(),
        failed=failed,
        missing=ids[positions < 0],
        layouts=index.layouts(),
        duplicates=index.duplicates,
        torn=index.torn,
        corrupt=index.corrupt,
    )
