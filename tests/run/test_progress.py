"""Progress where people wait: on a terminal the line moves while no result comes, and each step
before generation is named; in a batch log neither adds a line."""

from __future__ import annotations

import io
import logging
import threading

from eagle3_synth.engines.base import GenerationResult
from eagle3_synth.run.progress import Progress, RunSummary, StepNotes

WAIT = 30.0  # seconds a test waits for the ticker's frames before it fails


class Terminal(io.StringIO):
    """A stream that is a terminal, and tells a waiting test once it holds `frames` redraws."""

    def __init__(self, frames: int):
        super().__init__()
        self.frames, self.enough = frames, threading.Event()

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        written = super().write(text)
        if self.getvalue().count("\r") >= self.frames:
            self.enough.set()
        return written


def result(sample_id: int) -> GenerationResult:
    return GenerationResult(sample_id, [1, 2, 3], "stop", prompt_tokens=10, completion_tokens=3)


def test_the_line_is_redrawn_while_no_result_comes():
    terminal = Terminal(frames=3)
    now = [0.0]
    progress = Progress(RunSummary(config="B1_glaive", run_dir="r"), total=6, done=0, stream=terminal,
                        redraw_every=0.01, clock=lambda: now[0])
    now[0] = 75.0  # 75 s into generation, the first batch still generating
    progress.start()
    assert terminal.enough.wait(WAIT), terminal.getvalue()
    progress.update(result(0))
    progress.close()
    frames = terminal.getvalue().split("\r")[1:]
    waiting = ("[....................] B1_glaive: 0/6 samples (0.0%) | generating, no result yet | ETA ? "
               "| 1m15s elapsed\x1b[K")
    assert frames[:3] == [waiting] * 3  # drawn at the start, then by the ticker: no result had come
    assert frames[-1].startswith("[###.................] B1_glaive: 1/6 samples (16.7%) | 0.01 samples/s")
    assert frames[-1].endswith("| 1m15s elapsed\x1b[K\n")


def test_a_batch_log_gets_no_ticker_lines(caplog):
    stream = io.StringIO()
    progress = Progress(RunSummary(config="B1_glaive", run_dir="r"), total=6, done=0, stream=stream,
                        redraw_every=0.01, log_every=60.0)
    with caplog.at_level(logging.INFO, logger="eagle3_synth.run.progress"):
        progress.start()
        assert progress._ticker is None  # noqa: SLF001 - no thread to draw anything
        progress.close()
    assert stream.getvalue() == "" and caplog.records == []


def test_each_step_before_generation_is_named_on_a_terminal_only():
    terminal, log_file = Terminal(frames=1), io.StringIO()
    for stream in (terminal, log_file):
        note = StepNotes("B1_glaive shard 2 of 4", stream)
        note("loading the tokenizer, checking its chat template")
        note("starting the engine: transformers (model m, device cpu, batch size 8)")
    assert terminal.getvalue() == ("B1_glaive shard 2 of 4: loading the tokenizer, checking its chat template ...\n"
                                   "B1_glaive shard 2 of 4: starting the engine: transformers (model m, device cpu, "
                                   "batch size 8) ...\n")
    assert log_file.getvalue() == ""
