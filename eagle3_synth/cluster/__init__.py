"""Many nodes: one shard of a config per task of a scheduler clusters already run (Slurm job arrays,
Ray, or local processes), through datatrove's executors (the optional extra `[cluster]`).

Above the library and beside `publish`: it drives `run.generate` exactly as `eagle3-synth generate`
does, one shard per rank; only the command line imports it. `status` reads where the shards stand
from the run directory alone (our journal and datatrove's completion markers), so it needs neither
datatrove nor a scheduler.
"""
