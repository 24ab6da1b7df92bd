// cuDNN loaded at run time (src/runtime/cudnn.h): it loads, and says its version, with no GPU;
// a library that is no cuDNN, or one built for another major CUDA version, is refused by name.
#include <doctest/doctest.h>

#include <cstdlib>

#include "runtime/cudnn.h"
#include "test_util.h"

namespace tec::runtime {

TEST_CASE("a library that is no cuDNN is refused at its first entry point, as a device error") {
  const Error e = test::error_of([] { (void)load_cudnn("libc.so.6"); });
  CHECK(e.kind() == ErrorKind::device);
  CHECK(e.message().find("has no entry point cudnnGetVersion") != std::string::npos);
}

TEST_CASE("the library a process loads: the environment variable's file when set, else the soname") {
  ::unsetenv("TEC_TEST_LIBRARY_CHOICE");
  LibraryChoice choice = library_from_environment("TEC_TEST_LIBRARY_CHOICE", "libcudnn.so.9", "plan 'x'");
  CHECK(choice.file == "libcudnn.so.9");
  CHECK(choice.needed_for == "plan 'x'");
  ::setenv("TEC_TEST_LIBRARY_CHOICE", "/opt/wheel/lib/libcudnn.so.9", 1);
  choice = library_from_environment("TEC_TEST_LIBRARY_CHOICE", "libcudnn.so.9", "plan 'x'");
  CHECK(choice.file == "/opt/wheel/lib/libcudnn.so.9");
  CHECK(choice.needed_for == "plan 'x' (TEC_TEST_LIBRARY_CHOICE)");  // so the error says where the path came from
  ::unsetenv("TEC_TEST_LIBRARY_CHOICE");
}

TEST_CASE("the CUDA toolkit's cuDNN loads without a GPU, says its version, and is refused for another CUDA major") {
#ifdef TEC_TEST_CUDNN_LIBRARY
  const CudnnLibrary c = load_cudnn(TEC_TEST_CUDNN_LIBRARY);
  CHECK(c.version >= kMinCudnnVersion);
  CHECK(c.version < 100000);  // cuDNN 9
  CHECK(c.cudart_version / 1000 == 13);
  CHECK(std::string(c.get_error_string(0)) == "CUDNN_STATUS_SUCCESS");
  CHECK(c.library.handle() != nullptr);
  MESSAGE("cuDNN " << c.version << " (CUDA " << c.cudart_version << ") from " << c.library.path());
  const Error e = test::error_of([] { (void)load_cudnn(TEC_TEST_CUDNN_LIBRARY, 12080); });
  CHECK(e.kind() == ErrorKind::device);
  CHECK(e.message().find("built for CUDA 13, but this process runs CUDA 12 (install the cuDNN 9 for CUDA 12") != std::string::npos);
#else
  MESSAGE("SKIPPED: the build machine has no libcudnn.so.9 (CMake's TEC_TEST_CUDNN_LIBRARY); the loader's errors are tested above");
#endif
}

}  // namespace tec::runtime
