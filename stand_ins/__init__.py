"""Stand-ins for the services and data eagle3-synth meets, shared by tests/ and benchmarks/ (never shipped):
`sglang_server` (a loopback server speaking SGLang's `/generate`, with faults and a model of a
continuous-batching scheduler), `sglang_results` (SGLang's result dicts, as its source writes them),
`real_sglang` (the real SGLang's `launch_server`, started and stopped by pid), and for the data,
`drafters` (drafters of the tiny model's shapes) and `synthetic_conversations` (the seeded chat,
tool-calling and arithmetic conversations the fixture tokenizers and tiny model are trained on)."""
