"""The in-process engine's process hygiene on the real SGLang 0.5.23: `close()` ends the engine's
processes and spares every other child of the caller (SGLang's own shutdown SIGKILLs them all,
processes.py), and removes the shared-memory segment SGLang's CPU all-reduce leaves behind, on the
CPU backend in bf16."""

from __future__ import annotations

import json
import subprocess

from ...support.real_sglang import TINY_MODEL, sglang_env, sglang_python


SCRIPT = r'''
import json, subprocess, sys
from eagle3_synth.engines import EngineOptions, GenerationRequest, SamplingParams, create_engine
from eagle3_synth.engines.sglang.processes import child_pids, mapped_shm_segments

if __name__ == "__main__":
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    engine = create_engine("sglang", EngineOptions(model=sys.argv[1], dtype="bfloat16", max_in_flight=2,
                                                   engine_args={"device": "cpu", "mem_fraction_static": 0.1}))
    engine_pids = sorted(engine.owned_pids)
    segments = sorted(map(str, mapped_shm_segments(engine.owned_pids)))  # the CPU all-reduce's (AMX)
    try:
        params = SamplingParams(max_new_tokens=24, temperature=0.0, stop_token_ids=(2033, 2034), vocab_size=2048)
        results = [r.__dict__ for r in engine.generate([GenerationRequest(i, [2032, 5 + i, 17, 99]) for i in range(3)],
                                                       params)]
    finally:
        engine.close()
    alive = mine.poll() is None
    mine.kill()
    mine.wait()
    def running(pid):  # a killed child not yet reaped is a zombie (state Z), not a process left running
        try:
            return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    import os
    print(json.dumps({"spared": alive, "engine_pids": engine_pids, "segments": segments,
                      "segments_left": [s for s in segments if os.path.exists(s)],
                      "children_after": sorted(p for p in child_pids() if running(p)),
                      "results": results}))
'''


def test_closing_the_real_engine_ends_its_processes_and_spares_the_callers_others(tmp_path):
    script = tmp_path / "engine_processes.py"
    script.write_text(SCRIPT)
    done = subprocess.run([str(sglang_python()), str(script), str(TINY_MODEL)], capture_output=True, text=True,
                          env=sglang_env(), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["spared"], "closing the engine killed another child of the caller"
    assert report["engine_pids"], "no engine process was noted at launch"
    assert not set(report["engine_pids"]) & set(report["children_after"]), "engine processes left running after close()"
    # On a CPU with AMX the engine's rank maps one all-reduce segment that SGLang never unlinks;
    # close() removes exactly the ones its processes had mapped.
    amx = " amx_tile " in " " + open("/proc/cpuinfo").read().replace("\n", " ") + " "
    assert len(report["segments"]) == (1 if amx else 0), report["segments"]
    assert report["segments_left"] == [], "close() left the engine's shared-memory segment in /dev/shm"
    assert sorted(r["sample_id"] for r in report["results"]) == [0, 1, 2]
    for result in report["results"]:
        assert result["error"] is None and result["finish_reason"] in ("stop", "length")
        assert len(result["output_ids"]) == result["completion_tokens"] <= 24
