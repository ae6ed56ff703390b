"""speculators 0.9.0's own CLI, on a machine with no accelerator: two calls patched, nothing copied.

Run with the interpreter of the virtual environment speculators is installed in (`make
speculators-venv`: `.venv-speculators`), exactly as the `speculators` command:

    .venv-speculators/bin/python -m examples.speculators_cpu train --verifier-name-or-path ... \\
        --draft-attn-impl sdpa --loss-implementation eager --num-workers 0 --hidden-states-dtype float32

Those four flags are speculators' own way off the GPU-only paths (flex attention and the fused
triton loss, `train/config/schema.py: DraftArgs, LossArgs`; worker processes; bf16 autocast). What
no flag reaches, and is patched here (as read in speculators 0.9.0's wheel):

1. `Trainer.__init__` (`train/trainer.py`) stores `get_local_rank()` (an int, 0 when not launched
   by torchrun, `train/distributed.py: get_local_rank`, `maybe_setup_distributed`) as the device,
   and moves the model and every batch with `.to(self.local_rank)` (`Trainer.setup_model`,
   `_setup_model_ddp`, `train_epoch`, `val_epoch`). On a build with no accelerator `tensor.to(0)`
   raises "Cannot access accelerator device when none is available". The trainer's module-level
   name `get_local_rank` is rebound to return the CPU device: only the trainer sees it (the rank
   used by the logger and the batch-recovery code is untouched; `train/recovery.py:
   BatchRecoveryCoordinator._default_device` falls back to the CPU by itself).
2. `train/trainer.py: _StepTimer.mark, _StepTimer.now`: the step timer calls
   `torch.accelerator.synchronize()` on every logged step (always on the first), which raises the
   same error with no accelerator. With none there is nothing to wait for, so the call returns at
   once then; with one it is the original call.

The trainer's autocast uses device type "cuda" when there is no accelerator (`Trainer.__init__`);
torch disables it with a warning, which with `--hidden-states-dtype float32` changes nothing.
With SPECULATORS_METRICS_JSONL=FILE set, each metrics record the trainer logs (the dicts it gives
its `speculators.metrics` logger, `metric_logger` in `train/trainer.py`, from `train_epoch` and
`val_epoch`) is also appended to FILE as one JSON line: a reader of the accuracies that does not
parse the console. That is a logging handler, not a patch.
Nothing here is imported by eagle3_synth (the package never imports speculators).
"""

from __future__ import annotations

import json
import logging
import os
import sys

import torch

SPECULATORS_VERSION = "0.9.0"


def _synchronize_if_any(original):  # noqa: ANN001, ANN202 - wraps torch's own function
    def synchronize(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if not torch.accelerator.is_available():
            return None
        return original(*args, **kwargs)

    synchronize.__wrapped__ = original  # type: ignore[attr-defined]
    return synchronize


def patch() -> None:
    """Apply both patches (idempotent); refuse another speculators release, whose lines may differ."""
    from importlib.metadata import version

    import speculators.train.trainer as trainer

    found = version("speculators")
    if found != SPECULATORS_VERSION:
        raise SystemExit(f"examples/speculators_cpu.py: error: patches read from speculators {SPECULATORS_VERSION}, "
                         f"found {found}; check train/trainer.py again before running")
    if torch.accelerator.is_available():
        return  # a GPU build with a device: nothing to patch
    trainer.get_local_rank = lambda: torch.device("cpu")  # patch 1
    if not hasattr(torch.accelerator.synchronize, "__wrapped__"):
        torch.accelerator.synchronize = _synchronize_if_any(torch.accelerator.synchronize)  # patch 2


def _plain(value: object) -> float | str:
    """A metric the trainer left as a tensor or numpy scalar, as a number; anything else as text."""
    return float(value) if hasattr(value, "__float__") else str(value)  # type: ignore[arg-type]


class JsonLinesMetrics(logging.Handler):
    """Appends each dict-valued record of `speculators.metrics` (with its step) to a JSON-lines file."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, dict):
            line = json.dumps({**record.msg, "step": getattr(record, "step", None)}, default=_plain)
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(line + "\n")


def tap_metrics(path: str) -> None:
    """Put the JSON-lines handler on the root logger, before speculators' console handler.

    Not on `speculators.metrics` itself: `setup_metric_logger` re-creates that logger's handlers
    with `dictConfig` (`train/logger.py: setup_metric_logger`). Before the console handler, because that one's
    `FormatDictFilter` turns the dict into a string in place (`FormatDictFilter.filter`). Installing the
    console handler first with speculators' own `setup_root_logger` leaves the
    trainer's later call a no-op (`logging.basicConfig` does nothing once the root has handlers).
    """
    from speculators.train.logger import setup_root_logger

    setup_root_logger()
    logging.getLogger().handlers.insert(0, JsonLinesMetrics(path))


def main(argv: list[str]) -> None:
    patch()
    if os.environ.get("SPECULATORS_METRICS_JSONL"):
        tap_metrics(os.environ["SPECULATORS_METRICS_JSONL"])
    from speculators.__main__ import app

    app(args=argv, prog_name="speculators")


if __name__ == "__main__":
    main(sys.argv[1:])
