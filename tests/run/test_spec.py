"""Every field of the run spec reaches the fingerprint; plumbing does not.

The test walks the spec's dataclasses: each leaf field must have a variant below, and the variant
must change the fingerprint. A field added to the spec without reaching the fingerprint -- the one
failure this package exists to prevent (runs with other settings mixed) -- fails here, and so does
a field added without a variant, so nobody can forget either.
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from eagle3_synth.errors import ConfigError
from eagle3_synth.prompts.configs import get_config
from eagle3_synth.prompts.selection import PromptPlan, PromptSelection
from eagle3_synth.run.spec import fingerprint, ModelSpec, RunSpec, SamplingSpec, spec_fields

from ..conftest import KIMI_TOKENIZER, QWEN_TOKENIZER, TINY_MODEL
from ..support.prompt_cases import fixture_files


@pytest.fixture()
def files(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "Hi"}]}\n', encoding="utf-8")
    other_prompts = tmp_path / "other.jsonl"
    other_prompts.write_text('{"messages": [{"role": "user", "content": "Hello"}]}\n', encoding="utf-8")
    replay = tmp_path / "replay.jsonl"
    replay.write_text('{"sample_id": 0, "output_ids": [1]}\n', encoding="utf-8")
    profile = tmp_path / "profiles.yaml"
    profile.write_text("{}\n", encoding="utf-8")
    model = tmp_path / "model"
    shutil.copytree(TINY_MODEL, model)
    return {"prompts": str(prompts), "other_prompts": str(other_prompts), "replay": str(replay),
            "profile": str(profile), "model": str(model)}


def leaf_paths(value, prefix="") -> list[str]:
    """Dotted paths of every field of a spec dataclass, opening nested spec dataclasses."""
    paths = []
    for spec_field in dataclasses.fields(value):
        item = getattr(value, spec_field.name)
        if dataclasses.is_dataclass(item) and type(item).__module__.startswith("eagle3_synth.") \
                and spec_field.name != "config":
            paths += leaf_paths(item, f"{prefix}{spec_field.name}.")
        else:
            paths.append(prefix + spec_field.name)
    return paths


def replaced(spec, path: str, value):
    head, _, rest = path.partition(".")
    if not rest:
        return dataclasses.replace(spec, **{head: value})
    return dataclasses.replace(spec, **{head: replaced(getattr(spec, head), rest, value)})


def bases(files) -> dict[str, RunSpec]:
    model = ModelSpec(tokenizer=str(KIMI_TOKENIZER), model=files["model"])
    from_file = RunSpec(prompts=PromptPlan(config=get_config("B1_glaive"), prompts_file=files["prompts"]), model=model)
    from_source = dataclasses.replace(from_file, prompts=PromptPlan(
        config=get_config("B1_glaive"), selection=PromptSelection(source_files=tuple(fixture_files("B1_glaive")))))
    from_dataset = dataclasses.replace(from_file, prompts=PromptPlan(
        config=get_config("B1_glaive"), selection=PromptSelection(from_source=True)))
    return {"file": from_file, "source": from_source, "dataset": from_dataset}


def variants(files) -> dict[str, tuple[str, object]]:
    """path -> (which base spec, another value)."""
    return {
        "prompts.config": ("file", get_config("B3_ultrachat")),
        "prompts.prompts_file": ("file", files["other_prompts"]),
        "prompts.selection.source_files": ("source", tuple(fixture_files("B1_glaive"))[:1] + (files["prompts"],)),
        "prompts.selection.from_source": ("file", True),  # a dataset instead of the prompts file
        "prompts.selection.revision": ("dataset", "v1.0"),
        "prompts.selection.seed": ("source", 7),
        "prompts.selection.scan_limit": ("source", 3),
        "prompts.limit": ("file", 1),
        "model.tokenizer": ("file", str(QWEN_TOKENIZER)),
        "model.model": ("file", None),
        "model.replay_file": ("file", files["replay"]),
        "model.trust_remote_code": ("file", True),
        "model.profile": ("file", "kimi_k2"),
        "model.profile_file": ("file", files["profile"]),
        "model.template_kwargs": ("file", {"thinking": False}),
        "model.template_date": ("file", "2026-01-02"),
        "model.context_length": ("file", 20_000),
        "model.engine_args": ("file", {"kv_cache_dtype": "fp8_e4m3"}),
        "model.dtype": ("file", "bfloat16"),
        "sampling.max_new_tokens": ("file", 64),
        "sampling.temperature": ("file", 0.0),
        "sampling.top_p": ("file", 0.9),
        "sampling.top_k": ("file", 20),
        "sampling.seed": ("file", 1),
        "sampling.min_p": ("file", 0.05),
        "conversations.turns": ("file", "all"),
        "conversations.samples_per_prompt": ("file", 3),
        "conversations.template_kwarg_mix": ("file", (({"thinking": True}, 0.5), ({"thinking": False}, 0.5))),
        "conversations.mix_seed": ("file", 5),
        "conversations.sampling_mix": ("file", (({"temperature": 0.0}, 0.5), ({"temperature": 1.0}, 0.5))),
        "validation": ("file", 0.1),
    }


def test_every_spec_field_reaches_the_fingerprint(files):
    specs = bases(files)
    table = variants(files)
    assert sorted(leaf_paths(specs["file"])) == sorted(table), "a spec field without a variant here"
    for path, (base, value) in table.items():
        spec = specs[base]
        assert fingerprint(spec_fields(replaced(spec, path, value))) != fingerprint(spec_fields(spec)), path


def test_validation_enters_the_fingerprint_only_when_given(files):
    """A run without --validation has the fingerprint of settings that never name it (no
    field); a count and a fraction are told apart."""
    spec = bases(files)["file"]
    assert "validation" not in spec_fields(spec)
    by_count, by_fraction = (spec_fields(dataclasses.replace(spec, validation=v)) for v in (1, 0.5))
    assert by_count["validation"] == 1 and by_fraction["validation"] == 0.5
    assert fingerprint(by_count) != fingerprint(by_fraction)


def test_a_changed_file_changes_the_fingerprint(files):
    spec = dataclasses.replace(bases(files)["file"], model=ModelSpec(tokenizer=str(KIMI_TOKENIZER),
                                                                      replay_file=files["replay"]))
    before = fingerprint(spec_fields(spec))
    with open(files["replay"], "a", encoding="utf-8") as handle:
        handle.write('{"sample_id": 1, "output_ids": [2]}\n')
    assert fingerprint(spec_fields(spec)) != before


def test_the_options_that_are_not_fingerprinted_change_no_field_of_it(files):
    """Each option whose field says it does not enter the fingerprint (its metadata, run/settings.py)
    leaves the spec as it is: a run can be resumed with another value of any of them."""
    from eagle3_synth.run.settings import GenerationSettings

    plumbing = {f.name for f in dataclasses.fields(GenerationSettings)
                if "option" in f.metadata and not f.metadata["option"]["fingerprint"]}
    changes = [{"template_kwarg_unchecked": True, "strict": True, "batch_size": 1, "device": "cpu"},
               {"engine": "sglang", "max_in_flight": 4, "priority": "turns-left", "max_retries": 2},
               {"engine": "sglang-http", "urls": ("http://127.0.0.1:1",), "request_timeout": 60.0},
               {"run_dir": "elsewhere", "num_shards": 2, "shard_index": 1, "max_hours": 1.0, "retry_errors": True}]
    assert {name for change in changes for name in change} == plumbing

    def fields_of(**settings):
        return spec_fields(GenerationSettings(model=files["model"], prompts=files["prompts"], **settings)
                           .run_spec("B1_glaive"))

    base = fields_of()
    for change in changes:
        assert fields_of(**change) == base, change


def test_engine_args_that_change_what_the_model_computes_are_fingerprinted_and_the_others_not(files):
    """`--engine-arg kv_cache_dtype/quantization/dtype` change the outputs' model: a run resumed
    with another is refused. Parallelism and memory knobs (tp_size, mem_fraction_static) and the
    batch size or device do not: a run may be resumed on other hardware."""
    from eagle3_synth.run.settings import GenerationSettings

    def fingerprint_of(**settings):
        spec = GenerationSettings(model=files["model"], prompts=files["prompts"], **settings).run_spec("B1_glaive")
        return fingerprint(spec_fields(spec))

    base = fingerprint_of(engine="sglang")
    assert fingerprint_of(engine="sglang", engine_args={"tp_size": 8, "mem_fraction_static": 0.8}) == base
    assert fingerprint_of(batch_size=1, device="cpu") == base
    for name, value in (("kv_cache_dtype", "fp8_e4m3"), ("quantization", "fp8")):
        assert fingerprint_of(engine="sglang", engine_args={name: value, "tp_size": 8}) != base, name


def test_the_dtype_is_fingerprinted_only_where_it_casts_the_checkpoint(files):
    """`--dtype` names the dtype every engine runs the model in. The checkpoint's own dtype (the
    default) enters no field, so naming it is the same run as not naming it; a cast does,
    and each cast is another run. `--engine-arg dtype` is refused for `--dtype`, and `auto` is
    no dtype at all (SGLang's auto runs a float32 checkpoint in float16)."""
    from eagle3_synth.engines import checkpoint_dtype
    from eagle3_synth.run.settings import GenerationSettings

    def spec_of(**settings):
        return GenerationSettings(model=files["model"], prompts=files["prompts"], **settings).run_spec("B1_glaive")

    own = checkpoint_dtype(files["model"])
    assert own == "float32"  # the tiny fixture model's config.json
    base = spec_of(engine="sglang")
    assert spec_of(engine="sglang", dtype=own) == base and "dtype" not in spec_fields(base)["model"]
    casts = {dtype: fingerprint(spec_fields(spec_of(engine="sglang", dtype=dtype))) for dtype in ("bfloat16", "float16")}
    assert len(set(casts.values()) | {fingerprint(spec_fields(base))}) == 3
    assert spec_fields(spec_of(engine="sglang", dtype="bfloat16"))["model"]["dtype"] == "bfloat16"
    spec, settings = GenerationSettings(model=files["model"], prompts=files["prompts"], engine="sglang").resolve(
        "B1_glaive", "RUN")
    assert settings.engine_options(spec).dtype == "float32"  # passed explicitly, never left to the engine
    with pytest.raises(ConfigError, match=r"--engine-arg dtype=float16: give --dtype instead"):
        spec_of(engine="sglang", engine_args={"dtype": "float16"})
    with pytest.raises(ConfigError, match=r"--dtype must be one of bfloat16, float16, float32, got 'auto' "
                                          r"\(SGLang's auto would turn a float32 checkpoint into float16"):
        spec_of(engine="sglang", dtype="auto")


def test_each_difference_is_named_by_its_dotted_path():
    """A field left out when unset (--validation, --dtype) is named as not set, not as 'None'."""
    from eagle3_synth.run.spec import _differences

    assert _differences({"model": {"model": "m"}}, {"model": {"model": "m", "dtype": "bfloat16"}}) == [
        "model.dtype: not set for the run, this command has 'bfloat16'"]
    assert _differences({"validation": 10}, {}) == ["validation: run has 10, not set for this command"]
    assert _differences({"sampling": {"temperature": 0.6}}, {"sampling": {"temperature": 0.7}}) == [
        "sampling.temperature: run has 0.6, this command has 0.7"]


def test_a_refused_run_names_only_the_changed_field(files, tmp_path):
    """run.json holds the fields as JSON (tuples as lists): a tuple-valued field read back is no difference."""
    from eagle3_synth.run.directory import RunDirectory

    mix = variants(files)["conversations.sampling_mix"][1]
    spec = replaced(bases(files)["file"], "conversations.sampling_mix", mix)
    run = RunDirectory(tmp_path / "run")
    assert run.claim(spec_fields(spec)) == run.check_settings(spec_fields(spec)) == fingerprint(spec_fields(spec))
    with pytest.raises(ConfigError) as refused:
        run.check_settings(spec_fields(replaced(spec, "sampling.min_p", 0.05)))
    assert str(refused.value).endswith("Differences:\n  sampling.min_p: run has 0.0, this command has 0.05")
