// pipelink.h — the only header a component author needs.
//
// A component never hard-codes where it sits in the SM: every placement (shared-memory
// offsets, named-barrier ids, ring depth, facts owned by other components, its warp range)
// is read through a *handle*: an extern "C" device function that the linker defines
// after solving one joint placement. nvJitLink's LTO inlines the handle and folds the
// value into an immediate, so reading a handle costs nothing at run time.
//
// Handles take the instance number, so two instances of one package in one kernel get
// separate placements: the dispatcher calls each instance with a constant instance
// number and LTO folds the switch in the generated handle.
//
// Usage:
//   #define PL_COMPONENT mainloop            // the contract's component.name
//   #include <pipelink.h>
//   PL_DECLARE_SMEM(scratch);                // contract: [smem.scratch]
//   PL_ENTRY(run) { ... PL_SMEM_PTR(scratch) ... }
// No include guard on purpose: a control build includes several components into one
// translation unit, each with its own PL_COMPONENT; the shared helpers below are guarded.
#include <stdint.h>

#ifndef PL_COMPONENT
#error "define PL_COMPONENT to the contract's component.name before including pipelink.h"
#endif

#define PL_CAT_(a, b) a##b
#define PL_CAT(a, b) PL_CAT_(a, b)
// pl_<component>__<kind>__<name>
#define PL_SYM(kind, name) PL_CAT(PL_CAT(PL_CAT(pl_, PL_COMPONENT), PL_CAT(__, kind)), PL_CAT(__, name))

// ---- declarations (one per contract clause that has a handle) ----------------------
#define PL_DECLARE_HANDLE_(kind, name) extern "C" __device__ unsigned PL_SYM(kind, name)(unsigned)
// [smem.<name>]; the second handle serves PL_SMEM_AT.
#define PL_DECLARE_SMEM(name)   \
  PL_DECLARE_HANDLE_(smem, name); \
  extern "C" __device__ unsigned PL_SYM(smem_at, name)(unsigned, unsigned, unsigned, const char*, unsigned)
// [barrier.<name>]; the other two handles serve PL_BARRIER_SYNC / PL_BARRIER_ARRIVE.
#define PL_DECLARE_BARRIER(name)                                                              \
  PL_DECLARE_HANDLE_(bar, name);                                                              \
  extern "C" __device__ void PL_SYM(bar_sync, name)(unsigned, unsigned, const char*, unsigned); \
  extern "C" __device__ void PL_SYM(bar_arrive, name)(unsigned, unsigned, const char*, unsigned)
#define PL_DECLARE_FACT(name) PL_DECLARE_HANDLE_(fact, name)          // [fact.<name>] read (u32)
// Typed facts: the declaration must match the contract's `type` (the handle returns that C type).
#define PL_DECLARE_FACT_U64(name) extern "C" __device__ unsigned long long PL_SYM(fact, name)(unsigned)
#define PL_DECLARE_FACT_I32(name) extern "C" __device__ int PL_SYM(fact, name)(unsigned)
#define PL_DECLARE_FACT_BOOL(name) extern "C" __device__ bool PL_SYM(fact, name)(unsigned)
// [workspace.<name>]: global memory the runtime lends the instance for the launch.
#define PL_DECLARE_WORKSPACE(name) extern "C" __device__ void* PL_SYM(ws, name)(unsigned, const void*)
#define PL_DECLARE_RING(name)                                          \
  PL_DECLARE_HANDLE_(ring_depth, name);                                \
  PL_DECLARE_HANDLE_(ring_buffer, name);                               \
  PL_DECLARE_HANDLE_(ring_full, name);                                 \
  PL_DECLARE_HANDLE_(ring_empty, name)                                 // [ring.<name>]
// An owned fact: its value is a compile-time constant of the owner, recorded in the object
// (pack checks it against the contract) and handed to readers by the linker.
#define PL_OWN_FACT(name, value) \
  extern "C" __device__ const unsigned PL_SYM(own, name) = (value)
#define PL_OWN_FACT_U64(name, value) \
  extern "C" __device__ const unsigned long long PL_SYM(own, name) = (value)
#define PL_OWN_FACT_I32(name, value) extern "C" __device__ const int PL_SYM(own, name) = (value)
#define PL_OWN_FACT_BOOL(name, value) extern "C" __device__ const bool PL_SYM(own, name) = (value)
// A tensor this component exports: calling it hands the thread's fragment to the importer
// the linker bound (directly, or through a generated shared-memory transfer). The
// exporter's pl_params travel along; the generated transfer turns them into the
// importer's own params, so the importer reads its host parameters with PL_PARAMS.
#define PL_DECLARE_EXPORT(name) \
  extern "C" __device__ void PL_SYM(export, name)(unsigned, const void*, void*, unsigned, unsigned)
// A tensor this component imports: the component defines this function. In its body
// pl_inst, pl_params (the importer's own host parameters), pl_frag (this thread's
// fragment, laid out as the contract's [import.<name>] layout says) and pl_row0/pl_col0
// (the tile origin) are in scope.
#define PL_IMPORT(name)                                                                  \
  extern "C" __device__ void PL_SYM(import, name)(unsigned pl_inst, const void* pl_params, \
                                                   void* pl_frag, unsigned pl_row0, unsigned pl_col0)
// Callables: the exporter defines PL_CALLABLE(name)(unsigned pl_inst, <args>); the importer
// declares PL_DECLARE_CALL(name, <arg types>) and calls PL_CALL(name, <args>).
#define PL_CALLABLE(name) extern "C" __device__ void PL_SYM(callable, name)
// A callable with a result: PL_CALLABLE_RET(unsigned, tile)(unsigned pl_inst, unsigned i) { ... }
#define PL_CALLABLE_RET(ret, name) extern "C" __device__ ret PL_SYM(callable, name)
#define PL_DECLARE_CALL(name, ...) extern "C" __device__ void PL_SYM(call, name)(unsigned, __VA_ARGS__)
#define PL_DECLARE_CALL_RET(ret, name, ...) extern "C" __device__ ret PL_SYM(call, name)(unsigned, __VA_ARGS__)

// The role entry the generated dispatcher calls from the instance's warps.
#define PL_ENTRY(name) \
  extern "C" __device__ void PL_SYM(entry, name)(unsigned pl_inst, const void* pl_params)

// ---- reading handles (inside PL_ENTRY / PL_IMPORT, where pl_inst is in scope) -------
#define PL_SMEM(name) PL_SYM(smem, name)(pl_inst)
#define PL_SMEM_PTR(name) (pl::smem_base() + PL_SMEM(name))
#define PL_BARRIER(name) PL_SYM(bar, name)(pl_inst)
// Checked forms, for code that wants `pipelink link --guard` to check it at run time. A plain
// link folds them to the unchecked code (PL_SMEM_PTR(name) + i * sizeof(T); a bar.sync on
// PL_BARRIER(name)); a guarded link traps, naming the clause and this file:line, when
//   PL_SMEM_AT(T, name, i)         element i of claim `name` as a T (an lvalue) lies outside the claim;
//   PL_BARRIER_SYNC(name, threads) `threads` is not the count of the barrier's contract clause
//   PL_BARRIER_ARRIVE(name, threads)  (a count the linked SASS shows as an immediate is checked at
//                                      every link already: L-BARRIER-THREADS).
#define PL_SMEM_AT(T, name, i)                                                                                \
  (*reinterpret_cast<T*>(pl::smem_base() + PL_SYM(smem_at, name)(pl_inst, (unsigned)(i) * (unsigned)sizeof(T), \
                                                                  (unsigned)sizeof(T), __FILE__, __LINE__)))
#define PL_BARRIER_SYNC(name, threads) PL_SYM(bar_sync, name)(pl_inst, (threads), __FILE__, __LINE__)
#define PL_BARRIER_ARRIVE(name, threads) PL_SYM(bar_arrive, name)(pl_inst, (threads), __FILE__, __LINE__)
#define PL_FACT(name) PL_SYM(fact, name)(pl_inst)  // any fact type: the declaration gives the C type
#define PL_WORKSPACE(name) PL_SYM(ws, name)(pl_inst, pl_params)
#define PL_RING_DEPTH(name) PL_SYM(ring_depth, name)(pl_inst)
#define PL_RING_BUFFER(name) PL_SYM(ring_buffer, name)(pl_inst)
#define PL_RING_FULL(name) PL_SYM(ring_full, name)(pl_inst)
#define PL_RING_EMPTY(name) PL_SYM(ring_empty, name)(pl_inst)
#define PL_EXPORT(name, frag, row0, col0) \
  PL_SYM(export, name)(pl_inst, pl_params, (void*)(frag), (row0), (col0))
#define PL_CALL(name, ...) PL_SYM(call, name)(pl_inst, __VA_ARGS__)
#define PL_PARAMS(type) (*static_cast<const type*>(pl_params))

// Warp range of this instance: the dispatcher passes it through handles too.
extern "C" __device__ unsigned PL_SYM(role, warp_begin)(unsigned);
extern "C" __device__ unsigned PL_SYM(role, warps)(unsigned);
#define PL_WARP_BEGIN() PL_SYM(role, warp_begin)(pl_inst)
#define PL_WARPS() PL_SYM(role, warps)(pl_inst)

#ifndef PL_HELPERS_DEFINED
#define PL_HELPERS_DEFINED
namespace pl {
// The dynamic shared-memory window every placement is an offset into.
__device__ __forceinline__ uint8_t* smem_base() {
  extern __shared__ __align__(1024) uint8_t pl_dynamic_smem[];
  return pl_dynamic_smem;
}
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Index of this thread within its role instance (0 .. 32*warps-1).
__device__ __forceinline__ unsigned role_thread(unsigned warp_begin) {
  return threadIdx.x - 32u * warp_begin;
}
// Warpgroup of role thread t (t / 128), broadcast from lane 0 so that ptxas knows it is
// warp-uniform: wgmma descriptors built from it then live in uniform registers instead of being
// moved by R2UR before every wgmma (measured 4-9% faster).
__device__ __forceinline__ unsigned role_warpgroup(unsigned t) { return __shfl_sync(0xffffffffu, t / 128u, 0); }
// Named barrier among `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrive at a named barrier without waiting (producer side of a `bar.sync` elsewhere).
__device__ __forceinline__ void named_barrier_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// mbarrier helpers (sm_90).
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// `count` arrivals at once (one thread standing for several).
__device__ __forceinline__ void mbar_arrive_count(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// A CUtensorMap as a kernel parameter (contract type "tmap": 128 bytes, 64-byte aligned),
// filled on the host by the component's host provider (docs/CONTRACTS.md, [host]).
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};
// One thread announces the bytes the stage's TMA copies will deliver, and arrives.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
               ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// 2-D TMA tile load (sm_90): box at (c0 = inner/contiguous coordinate, c1 = row) of the
// tensor `map` into shared memory `dst`, completing `bytes` on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
// 2-D TMA tile store from shared memory (bulk group; wait with tma_store_wait).
__device__ __forceinline__ void tma_store_2d(const TensorMap* map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(src)) : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until at most N committed store groups still read shared memory.
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
// The same copy delivered to every CTA of the cluster in `cta_mask`, at the same shared
// offset, completing on each destination's mbarrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const TensorMap* map, int c0, int c1, uint64_t* bar,
                                                      uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar)), "h"(cta_mask)
      : "memory");
}
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Arrive on the mbarrier at `bar`'s offset in CTA `cta` of this cluster (this CTA too).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, unsigned cta) {
  asm volatile(
      "{\n .reg .b32 remote;\n"
      " mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}"
      ::"r"(smem_addr(bar)), "r"(cta) : "memory");
}
// Arrive on the mbarrier at `bar`'s offset in CTAs 0 .. ctas-1 of this cluster (ctas = 1:
// this CTA's only): a stage multicast into every CTA is free once all of them released it.
__device__ __forceinline__ void mbar_arrive_cluster_ctas(uint64_t* bar, unsigned ctas) {
  if (ctas == 1) mbar_arrive(bar);
  else
    for (unsigned q = 0; q < ctas; ++q) mbar_arrive_cluster(bar, q);
}
// Global-memory flags between CTAs of one grid (stream-K fixups, readiness counters).
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Add and return the old value, acquire and release (the last of N arrivals sees everything).
__device__ __forceinline__ unsigned atom_acq_rel(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
// The same at system scope: the other side is another GPU (peer-mapped memory).
__device__ __forceinline__ unsigned ld_acquire_sys(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_sys(unsigned* p, unsigned v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release_sys(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void prefetch_tensor_map(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned phase) {
  asm volatile(
      "{\n .reg .pred p;\n"
      "PL_WAIT_%=:\n"
      " mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra PL_WAIT_%=;\n}\n" ::"r"(smem_addr(bar)), "r"(phase) : "memory");
}
}  // namespace pl
#endif
