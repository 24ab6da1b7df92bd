# Sourced by the GPU test scripts: where the loader finds no libnccl.so.2 or libcudnn.so.9 and
# $TEC_NCCL_LIBRARY / $TEC_CUDNN_LIBRARY are unset, point them at the python3 on PATH's NVIDIA
# wheels (PyTorch's nvidia-nccl-cu13 and nvidia-cudnn-cu13), if it has them. cuDNN also opens its
# engine libraries by name, so its lib/ goes on LD_LIBRARY_PATH.
wheel_lib() {  # PACKAGE: the wheel's lib/ folder, or nothing
  python3 -c "import nvidia.$1, os; print(os.path.join(list(nvidia.$1.__path__)[0], 'lib'))" 2>/dev/null
}
if [ -z "${TEC_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  lib=$(wheel_lib nccl)
  [ -n "$lib" ] && [ -f "$lib/libnccl.so.2" ] && export TEC_NCCL_LIBRARY=$lib/libnccl.so.2
fi
if [ -z "${TEC_CUDNN_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q libcudnn.so.9; then
  lib=$(wheel_lib cudnn)
  if [ -n "$lib" ] && [ -f "$lib/libcudnn.so.9" ]; then
    export TEC_CUDNN_LIBRARY=$lib/libcudnn.so.9
    export LD_LIBRARY_PATH=$lib:${LD_LIBRARY_PATH:-}
  fi
fi
