"""Generation: a run spec's prompts -> prompt ids -> engine -> journal, resumable.

`generate` fills a run directory and can be re-run after any crash: it generates only samples
without a result (`assemble.py` turns the run directory into rows).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, TextIO


from eagle3_synth import __version__
from eagle3_synth.prompts.templating import ChatTokenizer, load_tokenizer, today
from eagle3_synth.prompts.prepare import Preparation, iter_prepared_prompts
from eagle3_synth.prompts.rollouts import ChatTokenizers, iter_rollouts
from eagle3_synth.prompts.template_kwargs import check_run_kwargs
from eagle3_synth.engines import EngineOptions, SamplingParams, create_engine
from eagle3_synth.errors import PromptError
from eagle3_synth.run.directory import REJECTS_FILE, RunDirectory
from eagle3_synth.timestamps import utc_timestamp
from eagle3_synth.run.conversations import (DONE, FAILED, NextTurns, RolloutStates, Turn, TurnFeed, grouped_by_prefix,
                                             rollout_states, starting_turns)
from eagle3_synth.run.journal import JournalIndex
from eagle3_synth.run.kill_points import kill_point
from eagle3_synth.run.spec import RunOptions, RunSpec, SamplingSpec, spec_fields
from eagle3_synth.contract.profiles import MarkerIds, ModelProfile, choose_profile, resolve_markers
from eagle3_synth.run.progress import Progress, RunSummary

log = logging.getLogger(__name__)


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


def _sampling_params(sampling: SamplingSpec, markers: MarkerIds) -> SamplingParams:
    return SamplingParams(max_new_tokens=sampling.max_new_tokens, temperature=sampling.temperature,
                          stop_token_ids=markers.stop_ids, top_p=sampling.top_p, top_k=sampling.top_k,
                          seed=sampling.seed)


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


def _rollouts_to_do(run: RunDirectory, index: JournalIndex, options: RunOptions, summary: RunSummary
                    ) -> tuple[RolloutStates, set[int]]:
    """Where this shard's rollouts stand, and the first sample ids of those with a turn to generate;
    counts the rest into the summary."""
    shard = options.shard
    slots = run.prompt_slots()
    states = rollout_states(slots, index, shard, options.retry_errors)
    summary.rejected = sum(1 for reject in run.iter_rejects()
                           if shard.owns(reject.get("conversation_id", reject["sample_id"])))
    summary.prompts = len(states.state) + summary.rejected
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


def prompt_limit(spec: RunSpec, engine: Any) -> tuple[int | None, str]:
    """The longest prompt kept, and why: the model's context minus max_new_tokens (the spec), or
    the engine's own limit where it reports a tighter one (`max_prompt_tokens`, the SGLang engines)."""
    ours = spec.max_prompt_tokens
    report = getattr(engine, "max_prompt_tokens", None)
    theirs = report(spec.sampling.max_new_tokens) if callable(report) else None
    if theirs is not None and (ours is None or theirs < ours):
        log.info("prompts over %d tokens are skipped as too_long: the engine's limit with max_new_tokens %d",
                 theirs, spec.sampling.max_new_tokens)
        return theirs, "the engine's limit for max_new_tokens"
    return ours, Preparation.too_long_reason


def engine_options(spec: RunSpec, options: RunOptions) -> EngineOptions:
    """The engine's options: the plumbing of `options`, with the model, tokenizer and replay file of the spec."""
    return replace(options.engine_options, model=spec.model.model or options.engine_options.model,
                   tokenizer=spec.model.tokenizer, trust_remote_code=spec.model.trust_remote_code,
                   replay_file=spec.model.replay_file)


def generate(spec: RunSpec, options: RunOptions, *, progress_stream: TextIO | None = None) -> RunSummary:
    """Journal a result for every prompt of the shard that has none yet (or only errors, with
    `retry_errors`); stop handing out prompts at `max_hours`. Safe to re-run after any crash."""
    started = time.monotonic()
    deadline = None if options.max_hours is None else started + options.max_hours * 3600
    model = spec.model
    tokenizer = load_tokenizer(model.tokenizer, trust_remote_code=model.trust_remote_code,
                               option="--tokenizer" if model.tokenizer != model.model else "--model")
    profile, why = choose_profile(model.profile, tokenizer, model.profile_file)
    log.info("profile %s (%s)", profile.name, why)
    markers = resolve_markers(profile, tokenizer)
    run = RunDirectory(options.run_dir)
    check_run_kwargs(tokenizer, profile, spec.config, spec.model.template_kwargs, spec.conversations.template_kwarg_mix,
                     unchecked=options.template_kwarg_unchecked)
    chat = ChatTokenizer(tokenizer, spec.template_kwargs, profile=profile,
                         template_date=model.template_date or recorded_template_date(run) or today())
    if chat.probe is not None and not chat.probe.faithful:
        log.warning("this chat template renders no assistant tool call as given (%s); conversations with tool "
                    "history will be %s", "; ".join(chat.probe.lines()),
                    "rejected" if not chat.probe.renders_calls else "templated in the closest form")
    run_fingerprint = run.claim(
        fingerprint_fields(spec, profile, chat),
        meta={
            "markers": markers.to_json(),
            "message_probe": chat.probe.outcomes if chat.probe else None,
            "engine": options.engine,
            "model": _absolute(engine_options(spec, options).model),
            "tokenizer": _absolute(model.tokenizer),
            "trust_remote_code": model.trust_remote_code,
            "template_kwargs": spec.template_kwargs,
            # The config itself (source, license ...), so a card rendered in a process that never
            # loaded a --config-file still says where the prompts came from.
            "config": config_record(spec.config),
            "eagle3_synth_version": __version__,
            "versions": library_versions(options.engine),
            "started": utc_timestamp(),
        },
    )
    kill_point("run.claimed")
    engine = None
    limits: tuple[int | None, str] | None = None  # the longest prompt kept, and why (read once an engine runs)
    chats = ChatTokenizers(chat)  # the run's kwargs and every drawn mix, one templater each
    try:
        if not run.prompts_ready:
            # A new run needs its engine anyway; created first, its own prompt limit (SGLang: context,
            # max_req_input_len, speculative slots) bounds `too_long`, so no prompt the engine would
            # refuse becomes a sample error that --retry-errors cannot fix.
            engine = create_engine(options.engine, engine_options(spec, options))
            limits = prompt_limit(spec, engine)
            limit, why = limits
            rejects: list[dict[str, Any]] = []  # filled as the prompts stream into prompts.jsonl
            preparation = Preparation(strict=options.strict, workers=options.workers, tokenizer_path=model.tokenizer,
                                      trust_remote_code=model.trust_remote_code,
                                      rejects_file=f"{options.run_dir}/{REJECTS_FILE}", too_long_reason=why)
            conversations = iter_prepared_prompts(spec.prompts, chat, rejects, max_prompt_tokens=limit,
                                                  preparation=preparation, whole=spec.conversations.whole)
            run.write_prompts(iter_rollouts(conversations, spec.conversations, chats, rejects,
                                            max_prompt_tokens=limit, too_long_reason=why,
                                            reject=_rollout_reject(options.strict)), rejects)
        kill_point("prompts.ready")

        summary = RunSummary(config=spec.config.name, run_dir=options.run_dir, shard=str(options.shard),
                             max_new_tokens=spec.sampling.max_new_tokens)
        index = run.scan(run_fingerprint)
        states, todo = _rollouts_to_do(run, index, options, summary)
        if todo:
            engine = engine or create_engine(options.engine, engine_options(spec, options))
            limits = limits or prompt_limit(spec, engine)
            next_turns = NextTurns(chats, markers, profile, limits[0])
            progress = Progress(summary, total=summary.prompts - summary.rejected,
                                done=summary.already_done + summary.failed_before, engine=engine,
                                stream=progress_stream)

            def stop_at_deadline() -> None:
                summary.stopped = "deadline"

            try:
                with _sigterm_interrupts(), run.open_journal(run_fingerprint, options.shard) as journal, \
                        index.reader(run.fs) as read:
                    starts = starting_turns(run.iter_prompts(keep=todo.__contains__), states, read, next_turns)
                    if getattr(engine, "groups_prefixes", False):  # engines with a prefix cache (SGLang)
                        starts = grouped_by_prefix(starts)
                    feed = TurnFeed(starts, deadline, stop_at_deadline, priority=options.engine_options.priority)
                    for result in engine.generate(feed, _sampling_params(spec.sampling, markers)):
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
            except KeyboardInterrupt:
                summary.stopped = "interrupted"
            finally:
                progress.close()
    finally:
        if engine is not None:
            engine.close()
    summary.remaining = len(todo)
    summary.seconds = time.monotonic() - started
    return summary
