"""An SGLang general plugin installed with this project's CPU kernel build: on a CPU without AMX, keep
SGLang's CPU attention backend (`intel_amx`), the only CPU backend with EAGLE speculative decoding.

Why: on a CPU without AMX, SGLang 0.5.23 replaces the `intel_amx` attention backend by
`torch_native` (srt/arg_groups/overrides.py `_attention_backend_platform_fallbacks`:
`not get_platform().has_amx`), and `torch_native` has no EAGLE draft backends ("EAGLE is not supported in
decode attention backend torch_native", srt/speculative/draft_utils.py
`DraftBackendFactory.create_decode_backend`). The `intel_amx` backend's kernels are this build's:
decode attention runs on any AVX2 CPU, and extend attention, whose bf16 GEMMs need AMX in the
source, is computed by attention_0_5_23.cpp's ATen path where the CPU has none. So the build's own
plugin tells SGLang's argument resolution that the platform has AMX; `has_amx` is read nowhere else
on a Llama or Qwen target (`_attention_backend_platform_fallbacks` and gpt-oss's overrides only),
and the layers' own AMX choice reads the CPU itself (`cpu_has_amx_support()` in each layer module),
so they keep running `forward_native`.

SGLang loads general plugins (entry point group `sglang.srt.plugins`, srt/plugins/__init__.py) in
every process before its ServerArgs are built: `Engine.__init__` (srt/entrypoints/engine.py)
and `launch_server` (launch_server.py, under `__main__`). build_kernels.py installs this file as the module
`eagle3_synth_sglang_cpu` with that entry point; `SGLANG_PLUGINS` can exclude it.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def keep_cpu_attention_backend() -> None:
    if os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        return  # not SGLang's CPU platform (srt/utils/common.py `is_cpu`)
    from sglang.srt.utils.common import cpu_has_amx_support

    if cpu_has_amx_support():
        return  # a CPU with AMX (srt/utils/common.py `cpu_has_amx_support`): SGLang keeps intel_amx itself
    from sglang.srt.runtime_context import override_platform

    override_platform(has_amx=True).install()
    log.info("eagle3_synth_sglang_cpu: no AMX on this CPU; keeping the intel_amx attention backend "
             "(this build computes extend attention without AMX)")
