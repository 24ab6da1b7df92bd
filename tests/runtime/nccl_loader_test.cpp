// Libraries loaded at run time (src/runtime/dynamic_library.h, src/runtime/nccl.h): a plan
// that needs a missing or too-old library gets an error naming it and what needs it, as a
// device error (exit 7); NCCL itself loads, and says its version, with no GPU.
#include <doctest/doctest.h>

#include "runtime/nccl.h"
#include "test_util.h"

namespace tec::runtime {

TEST_CASE("a library that cannot be loaded is named with what needs it, as a device error (exit 7)") {
  const Error e = test::error_of(
      [] { (void)DynamicLibrary::open({"/nonexistent/libnccl.so.2", "libtec-no-such-library.so.9"}, "plan 'tp2.teplan' (all_gather 'g')"); });
  CHECK(e.kind() == ErrorKind::device);
  CHECK(exit_code(e.kind()) == 7);
  CHECK(e.message().starts_with("plan 'tp2.teplan' (all_gather 'g') needs libtec-no-such-library.so.9, which could not be loaded:"));
  // Every name tried, each with the loader's reason.
  CHECK(e.message().find("\n  /nonexistent/libnccl.so.2: ") != std::string::npos);
  CHECK(e.message().find("\n  libtec-no-such-library.so.9: ") != std::string::npos);
  CHECK(e.message().find("LD_LIBRARY_PATH") != std::string::npos);
}

TEST_CASE("an entry point the library lacks is named with the library") {
  const DynamicLibrary libc = DynamicLibrary::open({"libc.so.6"}, "the test");
  CHECK(libc.symbol("strlen") != nullptr);
  CHECK(libc.path().find("libc.so.6") != std::string::npos);
  const Error e = test::error_of([&] { (void)libc.symbol("ncclAllGather"); });
  CHECK(e.kind() == ErrorKind::device);
  CHECK(e.message().find("libc.so.6") != std::string::npos);
  CHECK(e.message().find("has no entry point ncclAllGather") != std::string::npos);
  // So a file that is no NCCL is refused at its first entry point.
  CHECK(test::error_of([] { (void)load_nccl("libc.so.6"); }).message().find("has no entry point ncclGetVersion") != std::string::npos);
}

TEST_CASE("the CUDA toolkit's NCCL loads without a GPU, every entry point resolved, and says its version") {
#ifdef TEC_TEST_NCCL_LIBRARY
  const NcclLibrary n = load_nccl(TEC_TEST_NCCL_LIBRARY);
  CHECK(n.version >= kMinNcclVersion);
  CHECK(n.version < 30000);  // NCCL 2.x: the ABI nccl.h describes
  for (const void* entry : {(const void*)n.get_error_string, (const void*)n.get_unique_id, (const void*)n.comm_init_rank_config,
                            (const void*)n.comm_get_async_error, (const void*)n.comm_count, (const void*)n.comm_user_rank,
                            (const void*)n.comm_finalize, (const void*)n.comm_destroy, (const void*)n.comm_abort,
                            (const void*)n.all_gather, (const void*)n.reduce_scatter, (const void*)n.all_reduce,
                            (const void*)n.group_start, (const void*)n.group_end})
    CHECK(entry != nullptr);
  CHECK(std::string(n.get_error_string(ncclInvalidArgument)).size() > 0);
  MESSAGE("NCCL " << n.version << " from " << n.library.path());
#else
  MESSAGE("SKIPPED: the build machine has no libnccl.so.2 (CMake's TEC_TEST_NCCL_LIBRARY); the loader's errors are tested above");
#endif
}

}  // namespace tec::runtime
