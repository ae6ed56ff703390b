"""SGLang 0.5.23 on the CPU for `make sglang-venv`: its kernels built from SGLang's own source
(`build_kernels`), their plugin (`cpu_plugin`) and the venv's check (`check_engine`)."""
