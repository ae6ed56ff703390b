"""Build SGLang's CPU kernels (`sgl_kernel.common_ops`) for sglang 0.5.23 and install them into a venv.

Run with the SGLang venv's interpreter (`make sglang-venv` does): the kernels are compiled against
the torch of the interpreter that runs this script.

Why a build of our own (docs/guides/engines.md, "The real SGLang on a CPU", says what it serves):
- no registry has a CPU build of `sgl_kernel` (sglang-kernel 0.4.10 on PyPI is CUDA-only, and the
  sglang wheel does not contain the kernels), so they are built from SGLang's own source:
  `python/sglang/kernels/aot/` of the sglang repository, from the tarball given by
  `--source` (default: `../shared/third_party/sglang-kernel-cpu-6127d1da.tar.gz`, checked by
  sha256) or from a checkout named by `SGLANG_KERNEL_SRC` (the repository root or that folder);
- the source's CMake (`csrc/cpu/CMakeLists.txt`, `find_package(Torch)`) refuses the CUDA build of
  torch that sglang needs on a machine without CUDA, so the same sources are compiled with
  `torch.utils.cpp_extension.CppExtension` and the same flags (CMakeLists.txt:110-131: x86-64-v4,
  AVX512-BF16/VNNI, AMX, OpenMP, `SGLANG_CPU_FP8_CVT_FTZ`; and libnuma);
- the source compiles for one of two targets, chosen by this machine's CPU (`build_target`): where
  /proc/cpuinfo lists every feature its x86_64 options compile for (AVX-512 F/BW/CD/DQ/VL,
  AVX512-BF16, AVX512-VNNI, AMX tile/bf16/int8: Sapphire Rapids and later), those options; on any
  other x86-64 CPU (an AMD EPYC with AVX2, an older Xeon), where that build stops at import with
  "Illegal instruction", the same sources for x86-64-v3 (AVX2, FMA) without the AVX-512/AMX options:
  `vec.h:3-5` then leaves `CPU_CAPABILITY_AVX512` undefined, every kernel takes the at::vec path
  the source keeps for CPUs without it (what its aarch64 build runs), and SGLang's Python, which
  finds no AMX (`srt/utils/common.py` `cpu_has_amx_support`), runs its layers' `forward_native` (torch) instead of
  most of these kernels (e.g. `srt/layers/layernorm.py` `RMSNorm.forward_cpu`). Slower, the same SGLang;
- the tarball's source (upstream 6127d1da) is older than 0.5.23's Python: the two attention ops'
  schemas differ (attention_0_5_23.cpp beside this file says how, and what it refuses); that file
  also computes extend attention in ATen on a CPU without AMX, and `install` puts an SGLang plugin
  beside the kernels (cpu_plugin.py) that keeps SGLang's CPU attention backend there, the one with
  EAGLE speculative decoding.
  `rename_attention_registrations` renames the source's own two registrations; nothing else of
  the source is changed.

The build (5-8 min on 2 cores) is cached outside the checkout, keyed by the source's sha256, the
compatibility file's sha256, the target's compile options, torch's version and Python's ABI:
`$EAGLE3_SYNTH_CACHE` (default `~/.cache/eagle3-synth`)`/sgl-kernel-cpu/<key>/sgl_kernel/`. A
machine builds it once; `install` copies the cached package into the venv's site-packages.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_TARBALL = REPO.parent / "shared" / "third_party" / "sglang-kernel-cpu-6127d1da.tar.gz"
TARBALL_SHA256 = "49a83e99c1df21783fe4ed344f09604e81b4bd1b8259eb92cae2dbf1a871faf7"
COMPAT = HERE / "attention_0_5_23.cpp"
# The build's SGLang plugin (cpu_plugin.py says why), installed as this module and distribution.
PLUGIN = HERE / "cpu_plugin.py"
PLUGIN_MODULE = "eagle3_synth_sglang_cpu"
PLUGIN_ENTRY_POINT = f"[sglang.srt.plugins]\nkeep_cpu_attention_backend = {PLUGIN_MODULE}:keep_cpu_attention_backend\n"
# The suffix the source's own registrations of the two ops get (the source's upstream commit).
OLD_SUFFIX = "_6127d1da"
RENAMED_OPS = ("decode_attention_cpu", "extend_attention_cpu")
# csrc/cpu/CMakeLists.txt:110-131 (x86_64): the compile options and definitions.
CXX_FLAGS = ["-O3", "-g0", "-Wno-unknown-pragmas", "-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni",
             "-mamx-tile", "-mamx-bf16", "-mamx-int8", "-fopenmp", "-DSGLANG_CPU_FP8_CVT_FTZ"]
LINK_FLAGS = ["-fopenmp", "-lnuma"]
# The /proc/cpuinfo flags those options compile for (x86-64-v4 is AVX-512 F/BW/CD/DQ/VL).
AMX_FEATURES = ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512_bf16", "avx512_vnni",
                "amx_tile", "amx_bf16", "amx_int8")
# The portable build: the same options less the AVX-512/AMX ones, for x86-64-v3 (any AVX2 CPU).
PORTABLE_FLAGS = ["-O3", "-g0", "-Wno-unknown-pragmas", "-march=x86-64-v3", "-fopenmp", "-DSGLANG_CPU_FP8_CVT_FTZ"]
TARGET_FLAGS = {"amx": CXX_FLAGS, "portable": PORTABLE_FLAGS}  # `build_target`'s name -> its compile options


def cpu_flags() -> set[str]:
    """This machine's CPU feature flags (the first `flags` line of /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            return next((set(line.split(":", 1)[1].split()) for line in handle if line.startswith("flags")), set())
    except OSError:
        return set()


def build_target(flags: set[str] | None = None) -> tuple[str, list[str]]:
    """("amx", []) where the CPU has every AMX_FEATURES flag, else ("portable", the missing ones)."""
    flags = cpu_flags() if flags is None else flags
    missing = [name for name in AMX_FEATURES if name not in flags]
    return ("portable", missing) if missing else ("amx", [])


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_tree(root: Path) -> str:
    """A checkout's content hash: every file's relative path and bytes, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(sha256_file(path).encode())
    return digest.hexdigest()


def find_source(tarball: Path, unpack_to: Path) -> tuple[Path, str]:
    """The kernel source folder (the one holding csrc/cpu and python/sgl_kernel) and its sha256."""
    checkout = os.environ.get("SGLANG_KERNEL_SRC")
    if checkout:
        root = Path(checkout)
        for candidate in (root, root / "python" / "sglang" / "kernels" / "aot", root / "sgl-kernel"):
            if (candidate / "csrc" / "cpu" / "torch_extension_cpu.cpp").is_file():
                return candidate, sha256_tree(candidate)
        sys.exit(f"SGLANG_KERNEL_SRC={checkout}: no csrc/cpu/torch_extension_cpu.cpp there, nor under "
                 "python/sglang/kernels/aot/ (an SGLang checkout's kernel source)")
    if not tarball.is_file():
        sys.exit(f"--source {tarball}: no such file (the SGLang CPU kernel source tarball; or set "
                 "SGLANG_KERNEL_SRC to a checkout of the sglang repository)")
    digest = sha256_file(tarball)
    if tarball == DEFAULT_TARBALL and digest != TARBALL_SHA256:
        sys.exit(f"{tarball}: sha256 {digest}, expected {TARBALL_SHA256}: not the source this build was checked on")
    with tarfile.open(tarball) as archive:
        archive.extractall(unpack_to, filter="data")
    tops = [p for p in unpack_to.iterdir() if p.is_dir()]
    if len(tops) != 1 or not (tops[0] / "csrc" / "cpu").is_dir():
        sys.exit(f"{tarball}: expected one folder holding csrc/cpu, found {[p.name for p in tops]}")
    return tops[0], digest


def rename_attention_registrations(source: str) -> str:
    """The source's `m.def("<op>(...` and `m.impl("<op>", ...` of the two attention ops under
    <op>_6127d1da, so that attention_0_5_23.cpp can register 0.5.23's schemas under the names
    0.5.23 calls. Each must be found exactly once: another source layout fails here, not at run time."""
    for op in RENAMED_OPS:
        for old, new in ((f'"{op}(', f'"{op}{OLD_SUFFIX}('), (f'm.impl("{op}",', f'm.impl("{op}{OLD_SUFFIX}",')):
            if source.count(old) != 1:
                sys.exit(f"torch_extension_cpu.cpp: expected {old!r} once, found it {source.count(old)} times; "
                         "this source's registrations differ from the one attention_0_5_23.cpp was written for")
            source = source.replace(old, new)
    return source


def cache_key(source_sha: str, target: str) -> str:
    import torch

    flags = " ".join(TARGET_FLAGS[target])
    parts = f"{source_sha}:{sha256_file(COMPAT)}:{flags}:{torch.__version__}:{sysconfig.get_config_var('SOABI')}"
    digest = hashlib.sha256(parts.encode()).hexdigest()[:12]
    return f"{source_sha[:12]}-torch{torch.__version__.split('+')[0]}-{target}-{digest}"


def cache_root() -> Path:
    return Path(os.environ.get("EAGLE3_SYNTH_CACHE") or Path.home() / ".cache" / "eagle3-synth") / "sgl-kernel-cpu"


def compile_package(source: Path, work: Path, target: str) -> Path:
    """Compile common_ops for `target` next to a copy of python/sgl_kernel; returns that package folder."""
    from setuptools import Distribution
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    cpu = source / "csrc" / "cpu"
    if not Path("/usr/include/numa.h").is_file():
        sys.exit("libnuma's headers are missing (the kernels link libnuma): apt-get install libnuma-dev")
    patched = work / "torch_extension_cpu.cpp"
    patched.write_text(rename_attention_registrations((cpu / "torch_extension_cpu.cpp").read_text()))
    # CMakeLists.txt:27-52: every .cpp under csrc/cpu, the arch folders excluded, x86_64's added back.
    sources = [p for p in sorted(cpu.rglob("*.cpp"))
               if p.relative_to(cpu).parts[0] not in ("aarch64", "ppc64") and p.name != "torch_extension_cpu.cpp"]
    sources += [patched, COMPAT]
    extension = CppExtension(
        name="sgl_kernel.common_ops",
        sources=[str(p) for p in sources],
        include_dirs=[str(source / "csrc"), str(source / "include"), str(cpu)],
        extra_compile_args=TARGET_FLAGS[target],
        extra_link_args=LINK_FLAGS,
    )
    package = work / "build" / "sgl_kernel"
    shutil.copytree(source / "python" / "sgl_kernel", package)
    dist = Distribution({"name": "sgl_kernel", "ext_modules": [extension],
                         "cmdclass": {"build_ext": BuildExtension.with_options(use_ninja=True)}})
    command = dist.get_command_obj("build_ext")
    command.build_lib = str(work / "build")
    command.build_temp = str(work / "objects")
    command.parallel = int(os.environ.get("MAX_JOBS", os.cpu_count() or 1))
    dist.run_command("build_ext")
    built = list(package.glob("common_ops*.so"))
    if len(built) != 1:
        sys.exit(f"the build left {len(built)} common_ops libraries in {package}")
    return package


def build(tarball: Path) -> Path:
    """The cached package folder for this source and torch, built first if missing.

    The build's objects are kept in `<key>.build/` beside the cache entry until the build succeeds,
    so a build that stopped half-way (an error, a killed job) compiles only what it had not."""
    with tempfile.TemporaryDirectory(prefix="sgl-kernel-") as tmp:
        source, source_sha = find_source(tarball, Path(tmp) / "src")
        kind, missing = build_target()
        if missing:
            print(f"sgl_kernel (CPU): this CPU lacks {', '.join(missing)}: the source's portable build "
                  "(x86-64-v3: no AVX-512/AMX code, the kernels' at::vec paths)", flush=True)
        target = cache_root() / cache_key(source_sha, kind)
        if (target / "sgl_kernel").is_dir():
            print(f"sgl_kernel (CPU): cached build {target}")
            return target / "sgl_kernel"
        print(f"sgl_kernel (CPU): building from {source} (5-8 min on 2 cores) into {target}", flush=True)
        work = target.with_name(target.name + ".build")
        # The same path every time: ninja's record of what it compiled names the sources by path.
        shutil.copytree(source, work / "src", dirs_exist_ok=True)  # copy2: the sources' times kept
        shutil.rmtree(work / "build", ignore_errors=True)
        package = compile_package(work / "src", work, kind)
        staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=cache_root()))
        shutil.copytree(package, staging / "sgl_kernel")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            staging.rename(target)  # atomic: another build that finished first wins
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        return target / "sgl_kernel"


def install(package: Path) -> Path:
    """Copy the built package into this interpreter's site-packages (replacing an older copy), with
    the build's SGLang plugin beside it."""
    site = Path(sysconfig.get_paths()["purelib"])
    destination = site / "sgl_kernel"
    if destination.exists():
        shutil.rmtree(destination)
    shutil.copytree(package, destination)
    install_plugin(site)
    return destination


def install_plugin(site: Path) -> None:
    """cpu_plugin.py as the module `eagle3_synth_sglang_cpu`, and a distribution record whose entry
    point SGLang's plugin loader finds (importlib.metadata reads `<name>.dist-info/entry_points.txt`)."""
    shutil.copyfile(PLUGIN, site / f"{PLUGIN_MODULE}.py")
    info = site / f"{PLUGIN_MODULE}-0.dist-info"
    shutil.rmtree(info, ignore_errors=True)
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN_MODULE}\nVersion: 0\n"
                                   "Summary: eagle3-synth's SGLang CPU kernel build: its SGLang plugin\n")
    (info / "entry_points.txt").write_text(PLUGIN_ENTRY_POINT)
    (info / "RECORD").write_text(f"{PLUGIN_MODULE}.py,,\n{info.name}/METADATA,,\n{info.name}/entry_points.txt,,\n"
                                 f"{info.name}/RECORD,,\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_TARBALL, help="the kernel source tarball")
    parser.add_argument("--no-install", action="store_true", help="build (or find) the cached package only")
    args = parser.parse_args()
    cache_root().mkdir(parents=True, exist_ok=True)
    package = build(args.source)
    if not args.no_install:
        print(f"sgl_kernel (CPU): installed {install(package)}")


if __name__ == "__main__":
    main()
