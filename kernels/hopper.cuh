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
// A TMA tensor map (CUtensorMap) the runtime encoded when the session was created (plan
// launch field tensor_maps): a buffer as rows of row_bytes, read in boxes of box_rows rows x 128
// bytes in the 128-byte swizzle, rows past the last as zeros. A kernel with tensor maps takes
// them as its second parameter, `const __grid_constant__ TecTensorMaps`, so they sit in its
// parameter space, where the TMA unit reads them.
struct __align__(128) TecTensorMap {  // as cuda.h aligns CUtensorMap (TMA needs 64)
  unsigned long long opaque[16];
};
struct TecTensorMaps {
  TecTensorMap map[2];  // plan::kMaxTensorMaps
};
__device__ __forceinline__ void tec_prefetch_tensor_map(const TecTensorMap& map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(&map) : "memory");
}
// The box at byte `x`, row `y` of the map into shared memory at dst (1024-byte aligned: the
// swizzle's period), counted as its bytes on barrier bar.
__device__ __forceinline__ void tec_tensor_copy(u32 dst, const TecTensorMap& map, int x, int y, u32 bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
               "l"(&map), "r"(x), "r"(y), "r"(bar)
               : "memory");
}

__device__ __forceinline__ void tec_copy16(u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
// The same, or 16 zero bytes when !valid (cp.async's source size 0 reads nothing from src).
__device__ __forceinline__ void tec_copy16_or_zero(u32 dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// A shared-memory matrix descriptor for a K-major operand in 128-byte swizzled 8-row groups:
// start address, leading byte offset 16 (unused by this swizzle), stride 1024 bytes between
// groups of 8 rows, swizzle mode 1 (128 bytes).
__device__ __forceinline__ unsigned long long tec_sw128_descriptor(u32 address) {
  return (unsigned long long)((address & 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void tec_store_shared_u32(u32 address, u32 value) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(address), "r"(value) : "memory");
}

// A bulk copy from shared to global memory (16-byte aligned, bytes % 16 == 0). A thread's
// copies form a group at tec_bulk_store_commit; tec_bulk_store_wait_read returns once its
// groups have read their shared bytes (which may then be written again), tec_bulk_store_wait_all
// once they are complete.
__device__ __forceinline__ void tec_bulk_store(void* dst, u32 src, u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tec_bulk_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void tec_bulk_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void tec_bulk_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

__device__ __forceinline__ void tec_bulk_copy(u32 dst, const void* src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src),
               "r"(bytes), "r"(bar)
               : "memory");
}

// The 64 fp32 accumulators of a wgmma m64n128 per thread, as inline-asm operands: their
// register list (%0 .. %63) and the "+f" bindings of d[0..63]; the 128 of an m64n256 extend them.
#define TEC_WGMMA_D64_REGISTERS \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define TEC_WGMMA_D64_OPERANDS(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define TEC_WGMMA_D128_REGISTERS \
  TEC_WGMMA_D64_REGISTERS ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define TEC_WGMMA_D128_OPERANDS(d) \
  TEC_WGMMA_D64_OPERANDS(d), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// d (64 x 256, fp32) = A (64 x 16) . B (16 x 256) (+ d when `accumulate`), bf16 operands from
// shared memory by descriptor, each K-major (kTransposed 0) or MN-major (1).
template <int kTransposedA, int kTransposedB>
__device__ __forceinline__ void tec_wgmma_bf16_m64n256k16(float (&d)[128], unsigned long long a, unsigned long long b, int accumulate) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" TEC_WGMMA_D128_REGISTERS "}, %128, %129, p, 1, 1, %131, %132; }"
               : TEC_WGMMA_D128_OPERANDS(d)
               : "l"(a), "l"(b), "r"(accumulate), "n"(kTransposedA), "n"(kTransposedB));
}

// A shared-memory matrix descriptor of an MN-major operand in 128-byte swizzled atoms (64
// 16-bit values of M or N by 8 rows of K, 1 KB): `atom_bytes` from one atom to the next along
// M or N (the leading byte offset), 1024 bytes between groups of 8 rows of K (the stride).
__device__ __forceinline__ unsigned long long tec_sw128_mn_descriptor(u32 address, u32 atom_bytes) {
  return (unsigned long long)((address & 0x3FFFFu) >> 4) | ((unsigned long long)((atom_bytes >> 4) & 0x3FFFu) << 16) |
         ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}
