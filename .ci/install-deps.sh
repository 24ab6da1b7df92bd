#!/usr/bin/env bash
# Installs what a fresh Debian 12 + CUDA 13 machine lacks to build and test tec.
# Idempotent: a second run finds everything present and does nothing but say so.
set -euo pipefail

debian_packages=(
  build-essential cmake ninja-build
  nlohmann-json3-dev libcli11-dev doctest-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  python3 python3-pip
  clang libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes for .ci/fuzz
)

missing=()
for pkg in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

if ((${#missing[@]})); then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: Debian packages present"
fi

# Python tools used by tests (test vectors, ONNX models). Debian's python3-onnx is too old
# for FP8, so these come from PyPI. A pyenv/venv python takes them directly; Debian's system
# python needs --break-system-packages (PEP 668).
python_tools=(numpy ml_dtypes jsonschema onnx onnxruntime)
python_bin=${PYTHON:-python3}
pip_install() {
  local pip_flags=(--quiet --disable-pip-version-check)
  if "$python_bin" -c 'import sys; sys.exit(0 if sys.prefix == sys.base_prefix and sys.prefix.startswith("/usr") else 1)'; then
    pip_flags+=(--break-system-packages)
  fi
  "$python_bin" -m pip install "${pip_flags[@]}" "$@"
}
if ! "$python_bin" -c "import numpy, ml_dtypes, jsonschema, onnx, onnxruntime" 2>/dev/null; then
  echo "install-deps: installing Python tools: ${python_tools[*]}"
  pip_install "${python_tools[@]}"
else
  echo "install-deps: Python tools present"
fi

# The cuDNN frontend's C++ headers (attention through cuDNN, issue 25): PyPI's wheel puts them
# in site-packages/include, where CMake looks. cuDNN itself comes with CUDA 13 toolkits (and on
# GPU machines with PyTorch's nvidia-cudnn-cu13); tec loads it at run time.
if ! "$python_bin" -c "import os, sysconfig, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()['platlib'], 'include', 'cudnn_frontend.h')) else 1)"; then
  echo "install-deps: installing the cuDNN frontend headers (nvidia-cudnn-frontend)"
  pip_install nvidia-cudnn-frontend
else
  echo "install-deps: cuDNN frontend headers present"
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: note: no CUDA toolkit found; tec builds its CPU parts only" >&2
fi
