"""The one block prelude of every CUDA kernel family that uses blocks, threads and barriers.

Kernels that need more than a grid-stride loop (``elemwise.py``'s ``MGE_LOOP``) -- a block per
row reducing through shared memory (``reduce.py``, ``softmax.py``, ``norm.py``), a transpose
through a shared tile (``relayout.py``), block scans (``indexing.py``), grid-stride loops that
must see the real grid on the host too (``rng.py``, ``optimizer.py``) -- are written once, in
*phases* between barriers, with the macros of ``BLOCK_PRELUDE``::

    MGE_FOR_BLOCKS {                     /* CUDA: nothing; host: loops over gridDim (z, y, x)  */
        MGE_SHARED float tile[32][33];   /* CUDA: __shared__; host: static                     */
        MGE_THREADS { ...phase 1... }    /* CUDA: nothing; host: loops over blockDim (z, y, x) */
        MGE_SYNC                         /* CUDA: __syncthreads(); host: nothing               */
        MGE_THREADS { ...phase 2... }
    }

The host runs every thread of a block through one phase before any thread starts the next:
exactly the ordering a barrier guarantees.  The rules that make the two builds agree: a value
that crosses a barrier lives in shared memory (a thread's registers do not survive a host
phase); loops holding a barrier are uniform over the block and sit outside ``MGE_THREADS``; a
phase body never ``return``s, ``break``s or ``continue``s out of the phase (guards are ``if``).
Inside a phase, ``threadIdx``/``blockIdx``/``blockDim``/``gridDim`` are CUDA's on the GPU and
emulated ones on the host (``MGE_THREAD_IDS`` declares ``tx``, ``ty`` and the linear ``tid``).

The rest of the set:

* ``MGE_SHARED_ARRAY(T, name, count)`` -- the dynamic shared memory (``extern __shared__``) as
  ``T* name``; on the host a 96 KiB buffer, filled with 0xff bytes at each launch (a read of an
  element nobody wrote shows), and a kernel whose ``count`` exceeds the launch's shared bytes sets
  ``mge_host_error = 1`` and returns (the tests check plans that way);
* ``MGE_BLOCK_LOOP(r, n)`` -- block-stride loop over ``r < n`` (``r = blockIdx.x, +gridDim.x``;
  host: every emulated block in turn), ``MGE_GRID_LOOP(i, n)`` -- the grid-stride loop over
  emulated blocks and threads (so the host walks the plan's own grid, not a serial loop);
* ``MGE_BLOCK_FN`` (a device function holding barriers), ``MGE_MEMBER`` (a static member of an
  operation struct), ``mge_shfl_down`` (CUDA only: warp shuffles; host code pairs the same
  lanes through shared memory), ``MGE_INF_F``/``MGE_INF_D``/``MGE_NAN_F``/``MGE_NAN_D``.

**The host convention** (the one of every family): before calling a kernel the runner calls
``extern "C" void mge_host_launch(gx, gy, gz, bx, by, bz, shared_bytes)`` (all ``unsigned``),
which sets the emulated ``gridDim``/``blockDim`` (the weak globals ``mge_host_grid`` and
``mge_host_block``), the dynamic shared size, clears ``int mge_host_error`` and refills the shared
buffer; after the call ``mge_host_error`` non-zero means the kernel wanted more dynamic shared
memory than the launch gave (1) or the launch asked more than the host has (2).  Everything is
``weak``, so many translation units of one host library share one launch state;
``blockIdx``/``threadIdx`` are per translation unit (a kernel runs inside its own).
"""

__all__ = ["BLOCK_PRELUDE", "BLOCK_PARTS", "HOST_SHARED_BYTES"]

#: The dynamic shared memory the host build offers a launch.
HOST_SHARED_BYTES = 96 * 1024

#: The block prelude (include guard ``MGE_BLOCK_PRELUDE``); it needs elemwise's ``_PRELUDE``
#: (``MGE_FN``) before it: use ``BLOCK_PARTS``.
BLOCK_PRELUDE = r"""#ifndef MGE_BLOCK_PRELUDE
#define MGE_BLOCK_PRELUDE
/* Blocks, threads and barriers for kernels/*.py, written as phases (see kernels/block.py). */
#if defined(__CUDACC__)
#define MGE_MEMBER static __device__ __forceinline__
#define MGE_BLOCK_FN __device__
#define MGE_FOR_BLOCKS
#define MGE_THREADS
#define MGE_SYNC __syncthreads();
#define MGE_SHARED __shared__
#define MGE_SHARED_ARRAY(T, name, count) \
    extern __shared__ __align__(16) unsigned char mge_smem[]; T* name = (T*)mge_smem;
#define MGE_INF_F __int_as_float(0x7f800000)
#define MGE_INF_D __longlong_as_double(0x7ff0000000000000LL)
#define MGE_NAN_F __int_as_float(0x7fffffff)
#define MGE_NAN_D __longlong_as_double(0x7fffffffffffffffLL)
/* the value of lane + off of the warp (every lane of the warp calls it) */
template <class T> MGE_FN T mge_shfl_down(T v, unsigned off) {
    return (T)__shfl_down_sync(0xffffffffu, v, off);
}
#else
#include <string.h>
#define MGE_MEMBER static inline
#define MGE_BLOCK_FN static
#define MGE_HOST_SMEM @HOST_SMEM@
struct mge_dim3 { unsigned x, y, z; };
/* weak: one launch state shared by every translation unit of a host library */
extern "C" {
__attribute__((weak)) mge_dim3 mge_host_grid = {1, 1, 1};
__attribute__((weak)) mge_dim3 mge_host_block = {1, 1, 1};
__attribute__((weak)) unsigned mge_host_shared_bytes;
__attribute__((weak)) int mge_host_error;
__attribute__((weak)) unsigned char mge_host_smem[MGE_HOST_SMEM] __attribute__((aligned(16)));
__attribute__((weak)) void mge_host_launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                           unsigned by, unsigned bz, unsigned shared_bytes) {
    mge_host_grid.x = gx; mge_host_grid.y = gy; mge_host_grid.z = gz;
    mge_host_block.x = bx; mge_host_block.y = by; mge_host_block.z = bz;
    mge_host_shared_bytes = shared_bytes;
    mge_host_error = shared_bytes > MGE_HOST_SMEM ? 2 : 0;
    memset(mge_host_smem, 0xff, MGE_HOST_SMEM);
}
}
static mge_dim3 blockIdx, threadIdx;
#define gridDim mge_host_grid
#define blockDim mge_host_block
#define MGE_FOR_BLOCKS \
    for (blockIdx.z = 0; blockIdx.z < gridDim.z; ++blockIdx.z) \
    for (blockIdx.y = 0; blockIdx.y < gridDim.y; ++blockIdx.y) \
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x)
#define MGE_THREADS \
    for (threadIdx.z = 0; threadIdx.z < blockDim.z; ++threadIdx.z) \
    for (threadIdx.y = 0; threadIdx.y < blockDim.y; ++threadIdx.y) \
    for (threadIdx.x = 0; threadIdx.x < blockDim.x; ++threadIdx.x)
#define MGE_SYNC
#define MGE_SHARED static
/* more than the launch's dynamic shared memory: an error, and the kernel does nothing */
#define MGE_SHARED_ARRAY(T, name, count) \
    T* name = (T*)mge_host_smem; \
    if ((unsigned long long)(count) * sizeof(T) > mge_host_shared_bytes || mge_host_error) { \
        mge_host_error = 1; return; }
#define MGE_INF_F __builtin_huge_valf()
#define MGE_INF_D __builtin_huge_val()
#define MGE_NAN_F __builtin_nanf("")
#define MGE_NAN_D __builtin_nan("")
#endif
/* a phase's thread: x, y and the linear index in the block */
#define MGE_THREAD_IDS \
    const unsigned tx = threadIdx.x, ty = threadIdx.y; \
    const unsigned tid = (threadIdx.z * blockDim.y + ty) * blockDim.x + tx; \
    (void)tx; (void)ty; (void)tid;
/* r = this block's rows of n: blockIdx.x, + gridDim.x, ... (host: every block in turn) */
#define MGE_BLOCK_LOOP(r, n) \
    MGE_FOR_BLOCKS \
    for (long long r = blockIdx.x; r < (long long)(n); r += gridDim.x)
/* the grid-stride loop over the launch's own grid (host: its blocks and threads in turn) */
#define MGE_GRID_LOOP(i, n) \
    MGE_FOR_BLOCKS MGE_THREADS \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n); \
         i += (long long)blockDim.x * gridDim.x)
#endif /* MGE_BLOCK_PRELUDE */
""".replace("@HOST_SMEM@", str(HOST_SHARED_BYTES))


def _parts():
    from .elemwise import _PRELUDE
    return (("MGE_ELEMWISE_PRELUDE", _PRELUDE), ("MGE_BLOCK_PRELUDE", BLOCK_PRELUDE))


#: ``KernelSource.parts`` pieces every block kernel starts with: elemwise's prelude, then this.
BLOCK_PARTS = _parts()
