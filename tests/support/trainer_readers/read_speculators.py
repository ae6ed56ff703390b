"""speculators 0.9.0's own training reader over a prepared dataset and its hidden_states/ folder.

Usage (in .venv-speculators): python read_speculators.py PREPARED_DIR
`ArrowDataset(on_missing="raise")` is what `speculators train --on-missing raise` builds
(speculators/train/data.py: ArrowDataset, _get_raw_data): a missing file raises, a file whose
`token_ids` differ from the prepared row comes back as `SampleUnavailable`, reported here as such.
"""

from __future__ import annotations

import sys

from described import emit, tensor
from speculators.train.data import ArrowDataset

dataset = ArrowDataset(max_len=4096, datapath=sys.argv[1], on_missing="raise")
samples = []
for index in range(len(dataset)):
    sample = dataset[index]
    if not isinstance(sample, dict):
        samples.append({"unavailable": getattr(sample, "reason", repr(sample))})
        continue
    samples.append({key: tensor(value) for key, value in sorted(sample.items())})
emit(samples)
