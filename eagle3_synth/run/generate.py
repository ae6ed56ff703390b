"""Generation: a run spec's prompts -> prompt ids -> engine -> journal, resumable.

`generate` fills a run directory and can be re-run after any crash: it generates only samples
without a result (`assemble.py` turns the run directory into rows). In order: the checks that need
no model (`preflight.py`), the tokenizer (`run_setup`), a new run's prompts prepared aside
(`staging.py`), the run claimed (run.json), the engine started and its own prompt limit applied to
the prepared prompts before they are published, then generation. `dry_run` stops after preparing,
in memory, with no engine and nothing written.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from eagle3_synth import __version__
from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer, today
from eagle3_synth.prompts.rollouts import ChatTokenizers
from eagle3_synth.prompts.prepare import ModelVocab, check_model_and_tokenizer
from eagle3_synth.prompts.hygiene import check_run_kwargs
from eagle3_synth.engines import Engine, SamplingParams, create_engine
from eagle3_synth.engines.replay import check_replay_file
from eagle3_synth.errors import PromptError, Terminated
from eagle3_synth.run.directory import RunDirectory, StagedPrompts
from eagle3_synth.files import utc_timestamp
from eagle3_synth.run.conversations import (DONE, FAILED, NextTurns, RolloutStates, Turn, TurnFeed, grouped_by_prefix,
                                             rollout_states, starting_turns)
from eagle3_synth.run.journal import JournalIndex
from eagle3_synth.run.kill_points import kill_point
from eagle3_synth.run.preflight import check_before_loading, check_chat_template
from eagle3_synth.run.settings import GenerationSettings
from eagle3_synth.run.spec import RunSpec, SamplingSpec, spec_fields
from eagle3_synth.run.staging import ENGINE_LIMIT, OUR_LIMIT, DryRun, check_held_out, stage, survey, within
from eagle3_synth.contract.profiles import MarkerIds, ModelProfile, choose_profile, resolve_markers
from eagle3_synth.run.progress import Progress, PromptCounts, RunSummary, StepNotes, run_label

log = logging.getLogger(__name__)

# Engines that load no model to start (clients of running servers): started before the prompts are
# prepared, so that their servers' limit (context, max_req_input_len, speculative slots) bounds them.
LIMIT_BEFORE_PREPARING = frozenset({"sglang-http"})


def fingerprint_fields(spec: RunSpec, profile: ModelProfile, chat: ChatTokenizer) -> dict[str, Any]:
    """Everything that determines the output ids: the spec's identity (every field of it, see
    `spec.py`), plus what was resolved from it at the start of the run."""
    return {
        **spec_fields(spec),
        "profile": profile.name,
        "profile_definition": profile.to_json(),
        # How conversations are handed to the template (probed from it) and the date it renders.
        "template": {"message_form": chat.form.to_json(), "date": chat.template_date},
    }


def recorded_template_date(run: RunDirectory) -> str | None:
    """The template date a run directory was started with (None for a new run or a dateless one)."""
    if not run.exists():
        return None
    return (run.read_run_file()["fields"].get("template") or {}).get("date")


def _sampling_params(sampling: SamplingSpec, markers: MarkerIds, vocab_size: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=sampling.max_new_tokens, temperature=sampling.temperature,
                          stop_token_ids=markers.stop_ids, top_p=sampling.top_p, top_k=sampling.top_k,
                          min_p=sampling.min_p, seed=sampling.seed, vocab_size=vocab_size)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (a scheduler's preemption notice, `kill`) stops like Ctrl-C: the journal is closed
    on the way out -- on an object store that uploads the open segment -- and the run resumes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise Terminated(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _rollouts_to_do(run: RunDirectory, index: JournalIndex, options: GenerationSettings, summary: RunSummary
                    ) -> tuple[RolloutStates, set[int]]:
    """Where this shard's rollouts stand, and the first sample ids of those with a turn to generate;
    counts the rest into the summary."""
    shard = options.shard
    slots = run.prompt_slots()
    states = rollout_states(slots, index, shard, options.retry_errors)
    rejects = (r for r in run.iter_rejects() if shard.owns(r.get("conversation_id", r["sample_id"])))
    summary.counts = PromptCounts.of(slots.conversation[states.rollout], int(slots.turns[states.rollout].sum()),
                                     rejects)
    summary.already_done = states.count(DONE)
    summary.failed_before = states.count(FAILED)
    return states, set(slots.first[states.rollout[states.unfinished]].tolist())


def _rollout_reject(strict: bool) -> Callable[[dict[str, Any]], None]:
    """What happens to a rollout its drawn template kwargs make unusable: logged, or fatal under --strict."""
    def reject(record: dict[str, Any]) -> None:
        if strict:
            raise PromptError(f"{record['detail']} (--strict stops at the first rejected prompt)")
        log.warning("skipping rollout (%s): %s", record["reason"], record["detail"])
    return reject


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


def config_record(config: Any) -> dict[str, Any]:
    """A `ConfigSpec` as JSON (its tuples as lists)."""
    return json.loads(json.dumps(asdict(config)))


def prompt_limit(spec: RunSpec, engine: Engine) -> tuple[int | None, str]:
    """The longest prompt kept, and why: the model's context minus max_new_tokens (the spec), or
    the engine's own limit where it reports a tighter one (`max_prompt_tokens`, the SGLang engines)."""
    ours = spec.max_prompt_tokens
    theirs = engine.max_prompt_tokens(spec.sampling.max_new_tokens)
    if theirs is not None and (ours is None or theirs < ours):
        log.info("prompts over %d tokens are skipped as too_long: the engine's limit with max_new_tokens %d",
                 theirs, spec.sampling.max_new_tokens)
        return theirs, ENGINE_LIMIT
    return ours, OUR_LIMIT


@dataclass(frozen=True)
class RunSetup:
    """What a run resolves from its tokenizer before anything is generated or prepared."""

    profile: ModelProfile
    markers: MarkerIds
    chat: ChatTokenizer
    vocab: ModelVocab  # the ids every result is checked against (prompts/prepare.py)
    params: SamplingParams


def run_setup(spec: RunSpec, options: GenerationSettings, run: RunDirectory) -> RunSetup:
    """The tokenizer, profile, markers and chat templater: everything `generate` and `dry_run` need
    before prompts are prepared. Each of them runs `check_before_loading` (`preflight.py`) first.
    A replay file is checked here, record by record, before anything is prepared or claimed."""
    model = spec.model
    option = "--tokenizer" if model.tokenizer != model.model else "--model"
    tokenizer = load_tokenizer(model.tokenizer, trust_remote_code=model.trust_remote_code, option=option)
    check_chat_template(tokenizer, model.tokenizer, option)
    profile, why = choose_profile(model.profile, tokenizer, model.profile_file)
    log.info("profile %s (%s)", profile.name, why)
    markers = resolve_markers(profile, tokenizer)
    # A tokenizer of another model is refused before anything runs; every id is checked against the size.
    vocab = check_model_and_tokenizer(options.engine_options(spec).model, model.tokenizer, tokenizer,
                                      trust_remote_code=model.trust_remote_code)
    params = _sampling_params(spec.sampling, markers, vocab.size)
    if model.replay_file:
        check_replay_file(model.replay_file, params)  # a bad file: nothing prepared, nothing claimed
    check_run_kwargs(tokenizer, profile, spec.config, spec.model.template_kwargs,
                     spec.conversations.template_kwarg_mix, unchecked=options.template_kwarg_unchecked)
    chat = ChatTokenizer(tokenizer, spec.template_kwargs, profile=profile,
                         template_date=model.template_date or recorded_template_date(run) or today())
    if chat.probe is not None and not chat.probe.faithful:
        log.warning("this chat template renders no assistant tool call as given (%s); conversations with tool "
                    "history will be %s", "; ".join(chat.probe.lines()),
                    "rejected" if not chat.probe.renders_calls else "templated in the closest form")
    return RunSetup(profile, markers, chat, vocab, params)


def run_meta(spec: RunSpec, options: GenerationSettings, setup: RunSetup) -> dict[str, Any]:
    """What run.json records beside the fingerprinted fields: for assembly, the card and people."""
    model, chat = spec.model, setup.chat
    return {
        "markers": setup.markers.to_json(),
        "message_probe": chat.probe.outcomes if chat.probe else None,
        "engine": options.engine,
        "model": _absolute(options.engine_options(spec).model),
        "tokenizer": _absolute(model.tokenizer),
        "trust_remote_code": model.trust_remote_code,
        "vocab_size": setup.vocab.to_json(),  # what validate and publish check ids against
        "template_kwargs": spec.template_kwargs,
        # The config itself (source, license ...), so a card rendered in a process that never
        # loaded a --config-file still says where the prompts came from.
        "config": config_record(spec.config),
        "eagle3_synth_version": __version__,
        "versions": library_versions(options.engine),
        "started": utc_timestamp(),
    }


def engine_description(spec: RunSpec, options: GenerationSettings) -> str:
    """The engine a run would start, in words (a dry run's report)."""
    engine = options.engine_options(spec)
    dtype = [f"dtype {engine.dtype}"] if engine.dtype else []  # the resolved one (engines/__init__.py), never `auto`
    parts = {
        "transformers": [f"model {engine.model}", *dtype, f"device {engine.device or 'cpu'}",
                         f"batch size {engine.batch_size}"],
        "sglang": [f"model {engine.model}", *dtype] + [f"{k}={v}" for k, v in sorted(engine.engine_args.items())],
        "sglang-http": [f"url {url}" for url in engine.urls],
        "replay": [f"results from {engine.replay_file}"],
    }.get(options.engine, [])
    return f"{options.engine} ({', '.join(parts)})" if parts else options.engine


def dry_run(spec: RunSpec, options: GenerationSettings) -> DryRun:
    """What `generate` would do, without an engine and without writing: the checks and the
    tokenizer of a real run, then the prompts prepared in memory (a new run) or where the run
    directory stands (one whose prompts are prepared already)."""
    check_before_loading(spec, options)
    run = RunDirectory(options.run_dir)
    setup = run_setup(spec, options, run)
    report = DryRun(config=spec.config.name, run_dir=options.run_dir, engine=engine_description(spec, options),
                    max_new_tokens=spec.sampling.max_new_tokens, limit=(spec.max_prompt_tokens, OUR_LIMIT),
                    samples_per_prompt=spec.conversations.samples_per_prompt, started=run.exists())
    if report.started:
        run.check_settings(fingerprint_fields(spec, setup.profile, setup.chat))
    if run.prompts_ready:
        summary = RunSummary(config=spec.config.name, run_dir=options.run_dir, shard=str(options.shard))
        _, todo = _rollouts_to_do(run, run.scan(), options, summary)
        summary.remaining = len(todo)
        report.existing = summary
    else:
        report.prepared = survey(spec, options, setup.chat, ChatTokenizers(setup.chat), report.limit,
                                 _rollout_reject(options.strict))
        check_held_out(report.prepared, fingerprint_fields(spec, setup.profile, setup.chat))
    return report


def generate(spec: RunSpec, options: GenerationSettings, *, progress_stream: TextIO | None = None) -> RunSummary:
    """Journal a result for every prompt of the shard that has none yet (or only errors, with
    `retry_errors`); stop handing out prompts at `max_hours`. Safe to re-run after any crash.

    Holds the shard's lock of the run directory throughout (`lock.py`): a second generator of the
    same shard is refused, naming this one, before it loads anything. The checks that need no model
    run first, so a bad path is named as such rather than as a lock that could not be taken."""
    check_before_loading(spec, options)
    with RunDirectory(options.run_dir).lock(options.shard):
        return _generate(spec, options, progress_stream=progress_stream)


def _start_engine(spec: RunSpec, options: GenerationSettings, note: StepNotes) -> Engine:
    note(f"starting the engine: {engine_description(spec, options)}")
    return create_engine(options.engine, options.engine_options(spec))


def _generate(spec: RunSpec, options: GenerationSettings, *, progress_stream: TextIO | None = None) -> RunSummary:
    started = time.monotonic()
    run = RunDirectory(options.run_dir)
    note = StepNotes(run_label(spec.config.name, str(options.shard)), progress_stream)
    note("loading the tokenizer, checking its chat template")
    return _generate_set_up(spec, options, run, run_setup(spec, options, run), started, note)


def _generate_set_up(spec: RunSpec, options: GenerationSettings, run: RunDirectory, setup: RunSetup, started: float,
                     note: StepNotes) -> RunSummary:
    deadline = None if options.max_hours is None else started + options.max_hours * 3600
    profile, markers, chat = setup.profile, setup.markers, setup.chat
    fields = fingerprint_fields(spec, profile, chat)
    if run.exists():
        run.check_settings(fields)  # a run of other settings is refused before anything is prepared
    engine = None
    limits: tuple[int | None, str] | None = None  # the longest prompt kept, and why (read once an engine runs)
    chats = ChatTokenizers(chat)  # the run's kwargs and every drawn mix, one templater each
    staged: StagedPrompts | None = None
    try:
        if not run.prompts_ready:
            # Prepared before the engine starts (staging.py): a bad source or template shows before
            # a model loads; an engine that loads nothing (sglang-http) tells its limit first.
            if options.engine in LIMIT_BEFORE_PREPARING:
                engine = _start_engine(spec, options, note)
                limits = prompt_limit(spec, engine)
            note("preparing the prompts: reading them, templating each with the chat template")
            prepared = stage(run, spec, options, chat, chats, limits or (spec.max_prompt_tokens, OUR_LIMIT),
                             _rollout_reject(options.strict))
            staged = prepared.staged
        try:
            if staged is not None:
                check_held_out(prepared, fields)
            # Claimed once the prompts could be prepared: a start that failed there leaves no run
            # behind that would refuse the next command's corrected settings.
            run_fingerprint = run.claim(fields, meta=run_meta(spec, options, setup))
            kill_point("run.claimed")
            if staged is not None:
                if prepared.kept and engine is None:
                    engine = _start_engine(spec, options, note)
                    limits = prompt_limit(spec, engine)
                if limits:
                    staged = within(run, prepared, *limits)
                run.install_prompts(staged)
        except BaseException:
            if staged is not None:
                run.discard_staged(staged)
            raise
        kill_point("prompts.ready")

        summary = RunSummary(config=spec.config.name, run_dir=options.run_dir, shard=str(options.shard),
                             max_new_tokens=spec.sampling.max_new_tokens)
        index = run.scan(run_fingerprint)
        states, todo = _rollouts_to_do(run, index, options, summary)
        if todo:
            engine = engine or _start_engine(spec, options, note)
            limits = limits or prompt_limit(spec, engine)
            next_turns = NextTurns(chats, markers, profile, limits[0])
            progress = Progress(summary, total=summary.counts.rollouts, done=summary.already_done
                                + summary.failed_before, engine=engine, stream=note.stream).start()

            def stop_at_deadline() -> None:
                summary.stopped = "deadline"

            try:
                with _sigterm_interrupts(), run.open_journal(run_fingerprint, options.shard) as journal, \
                        index.reader(run.fs) as read:
                    starts = starting_turns(run.iter_prompts(keep=todo.__contains__), states, read, next_turns)
                    if engine.groups_prefixes:
                        starts = grouped_by_prefix(starts)
                    feed = TurnFeed(starts, deadline, stop_at_deadline, priority=options.priority == "turns-left")
                    for result in engine.generate(feed, setup.params):
                        turn = feed.take(result.sample_id, options.engine)
                        following = next_turns.after(turn, result.output_ids, result.finish_reason)
                        continues = isinstance(following, Turn)
                        journal.append(result, continues=continues, prompt=turn.journaled_prompt())
                        if continues:
                            feed.push(following)
                        else:
                            todo.discard(turn.rollout.sample_id)
                            summary.endings[following] += 1
                        progress.update(result, finished=not continues)
            except KeyboardInterrupt as exc:
                summary.stopped = "terminated" if isinstance(exc, Terminated) else "interrupted"
            finally:
                progress.close()
    finally:
        if engine is not None:
            engine.close()
    summary.remaining = len(todo)
    summary.seconds = time.monotonic() - started
    return summary
