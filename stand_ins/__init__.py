"""Stand-ins for the services eagle3-synth talks to, shared by tests/ and benchmarks/ (never shipped):
`sglang_server` (a loopback server speaking SGLang's `/generate`, with faults and a model of a
continuous-batching scheduler), `sglang_results` (SGLang's result dicts, as its source writes them)
and `real_sglang` (the real SGLang's `launch_server`, started and stopped by pid)."""
