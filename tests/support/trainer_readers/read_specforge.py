"""SpecForge 0.2.0's own offline route over a folder of `.ckpt` files, as its trainer reads them.

Usage (in .venv-specforge): python read_specforge.py CKPT_DIR
`OfflineManifestReader` lists the files (specforge/runtime/data_plane/offline_reader.py; with
`validate_files=True` it opens each and checks the four keys are tensors), `LocalFeatureStore.get`
loads a `file://` ref's features (runtime/data_plane/feature_store.py: get, _get_from_file), and
`normalize_offline_sample` maps them to the EAGLE-3 training tensors (algorithms/eagle3/data.py;
`build_offline_normalizer` returns exactly it without sequence parallelism). None of these modules
imports sglang, triton or transformers: the reader's chain is torch and the standard library.
"""

from __future__ import annotations

import sys

from described import emit, tensor
from specforge.algorithms.eagle3.data import normalize_offline_sample
from specforge.runtime.data_plane.feature_store import LocalFeatureStore
from specforge.runtime.data_plane.offline_reader import OfflineManifestReader

MAX_LEN = 2048  # SpecForge's default max_length (config/schema.py)

store = LocalFeatureStore()
samples = []
for ref in OfflineManifestReader(sys.argv[1], max_len=MAX_LEN, validate_files=True).read():
    features, handle = store.get(ref)
    sample = normalize_offline_sample(features, max_len=MAX_LEN)
    store.release(handle)
    samples.append({"file": ref.feature_store_uri.rpartition("/")[2], "num_tokens": ref.num_tokens,
                    **{key: tensor(value) for key, value in sorted(sample.items())}})
emit(samples)
