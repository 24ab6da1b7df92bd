// Hopper (sm_90a) building blocks of tec's wgmma GEMM kernels (gemm_mid_m.cu,
// grouped_gemm.cu): shared-memory addresses, mbarriers, TMA bulk copies, cp.async, and the
// shared-memory matrix descriptor of a K-major operand in 128-byte swizzled rows.
#pragma once

#include "common.cuh"

__device__ __forceinline__ u32 tec_shared_address(const void* p) {
  u32 address;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(address) : "l"(p));
  return address;
}

__device__ __forceinline__ void tec_barrier_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void tec_barrier_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void tec_barrier_arrive_expect_bytes(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tec_barrier_wait(u32 bar, u32 parity) {
  u32 done;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// With an L2 cache policy (createpolicy), e.g. evict_first for a weight read once per run.
__device__ __forceinline__ void tec_bulk_copy(u32 dst, const void* src, u32 bytes, u32 bar, unsigned long long policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tec_copy16(u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

// A shared-memory matrix descriptor for a K-major operand in 128-byte swizzled 8-row groups:
// start address, leading byte offset 16 (unused by this swizzle), stride 1024 bytes between
// groups of 8 rows, swizzle mode 1 (128 bytes).
__device__ __forceinline__ unsigned long long tec_sw128_descriptor(u32 address) {
  return (unsigned long long)((address & 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void tec_bulk_copy(u32 dst, const void* src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src),
               "r"(bytes), "r"(bar)
               : "memory");
}
