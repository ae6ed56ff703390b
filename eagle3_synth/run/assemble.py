"""Assembly's side of a run directory: contract rows in sample_id order, and what the run holds.

`iter_rows` works while a run is still generating (unfinished and failed samples are left out);
`check_run` says what a run holds before a dataset is written from it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from eagle3_synth.contract.profiles import MarkerIds
from eagle3_synth.contract.row import dumps_messages, dumps_tools, make_row
from eagle3_synth.errors import ConfigError
from eagle3_synth.run.directory import RunDirectory
from eagle3_synth.run.kill_points import kill_point
from eagle3_synth.run.progress import MAX_LISTED, Coverage


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
