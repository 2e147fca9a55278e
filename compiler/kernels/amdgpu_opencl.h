/* amdgpu_opencl.h: the small OpenCL C built-in header of amdgpu-direct.
 *
 * Force-included (-include) by compiler.clang when it builds OpenCL C with the clang of the
 * `ziglang` wheel, which ships no OpenCL headers and no ROCm device libraries. Everything here
 * is a thin inline wrapper over AMDGPU builtins and the code object v5 hidden kernel
 * arguments (the layout is the same in v6):
 *
 *   implicit argument block (right after the explicit arguments, 8-byte aligned)
 *     +0  hidden_block_count_x/y/z  u32   full work-groups per dimension (grid / group size)
 *     +12 hidden_group_size_x/y/z   u16   work-group size requested in the dispatch packet
 *     +18 hidden_remainder_x/y/z    u16   size of the last, partial group (grid % group size)
 *
 * So get_num_groups(d) = block_count + (remainder != 0), and get_local_size(d) is the group
 * size except in a trailing partial group, where it is the remainder (what ROCm's ockl does).
 */
#ifndef AMDGPU_DIRECT_OPENCL_H
#define AMDGPU_DIRECT_OPENCL_H

#define AMDGPU_DIRECT_OPENCL 1

/* Scalar and vector types that opencl-c-base.h would provide. */
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;

typedef float float2 __attribute__((ext_vector_type(2)));
typedef float float4 __attribute__((ext_vector_type(4)));
typedef int int2 __attribute__((ext_vector_type(2)));
typedef int int4 __attribute__((ext_vector_type(4)));
typedef uint uint2 __attribute__((ext_vector_type(2)));
typedef uint uint4 __attribute__((ext_vector_type(4)));

#define CLK_LOCAL_MEM_FENCE 0x01
#define CLK_GLOBAL_MEM_FENCE 0x02

#define AMDGPU_OCL_INLINE static inline __attribute__((always_inline))
#define AMDGPU_OCL_OVERLOAD static inline __attribute__((always_inline, overloadable))

/* --- hidden arguments (code object v5/v6) ------------------------------------------- */
/* Code object v4's hidden arguments start with the global offsets and hold no block counts:
 * there (compiler.clang defines AMDGPU_DIRECT_COV from -mcode-object-version) the grid and
 * group sizes come from the dispatch packet (+4 group sizes u16, +12 grid sizes u32), as
 * ROCm's ockl does for v4. Reading v5 offsets in a v4 object gave a grid-stride loop a
 * stride of 0: a kernel that never ends. */
#if defined(AMDGPU_DIRECT_COV) && AMDGPU_DIRECT_COV < 5
AMDGPU_OCL_INLINE uint __amdgpu_packet_grid(uint dim) {
    return ((__constant uint *)__builtin_amdgcn_dispatch_ptr())[3 + dim];
}

AMDGPU_OCL_INLINE uint __amdgpu_packet_group(uint dim) {
    return ((__constant ushort *)__builtin_amdgcn_dispatch_ptr())[2 + dim];
}

AMDGPU_OCL_INLINE uint __amdgpu_block_count(uint dim) {
    return dim < 3 ? __amdgpu_packet_grid(dim) / __amdgpu_packet_group(dim) : 1u;
}

AMDGPU_OCL_INLINE uint __amdgpu_remainder(uint dim) {
    return dim < 3 ? __amdgpu_packet_grid(dim) % __amdgpu_packet_group(dim) : 0u;
}
#else
AMDGPU_OCL_INLINE uint __amdgpu_block_count(uint dim) {
    __constant uint *hidden = (__constant uint *)__builtin_amdgcn_implicitarg_ptr();
    return dim < 3 ? hidden[dim] : 1u;
}

AMDGPU_OCL_INLINE uint __amdgpu_remainder(uint dim) {
    __constant ushort *hidden = (__constant ushort *)__builtin_amdgcn_implicitarg_ptr();
    return dim < 3 ? (uint)hidden[9 + dim] : 0u;
}
#endif

AMDGPU_OCL_INLINE uint __amdgpu_group_size(uint dim) {
    switch (dim) {
    case 0: return __builtin_amdgcn_workgroup_size_x();
    case 1: return __builtin_amdgcn_workgroup_size_y();
    case 2: return __builtin_amdgcn_workgroup_size_z();
    default: return 1u;
    }
}

/* --- work-item functions ------------------------------------------------------------ */
AMDGPU_OCL_INLINE size_t get_local_id(uint dim) {
    switch (dim) {
    case 0: return __builtin_amdgcn_workitem_id_x();
    case 1: return __builtin_amdgcn_workitem_id_y();
    case 2: return __builtin_amdgcn_workitem_id_z();
    default: return 0;
    }
}

AMDGPU_OCL_INLINE size_t get_group_id(uint dim) {
    switch (dim) {
    case 0: return __builtin_amdgcn_workgroup_id_x();
    case 1: return __builtin_amdgcn_workgroup_id_y();
    case 2: return __builtin_amdgcn_workgroup_id_z();
    default: return 0;
    }
}

AMDGPU_OCL_INLINE size_t get_num_groups(uint dim) {
    if (dim >= 3) return 1;
    return (size_t)__amdgpu_block_count(dim) + (__amdgpu_remainder(dim) != 0u ? 1u : 0u);
}

/* The size of this work-group: the requested size, or the remainder in a partial group. */
AMDGPU_OCL_INLINE size_t get_local_size(uint dim) {
    if (dim >= 3) return 1;
    return get_group_id(dim) < __amdgpu_block_count(dim) ? __amdgpu_group_size(dim)
                                                         : __amdgpu_remainder(dim);
}

AMDGPU_OCL_INLINE size_t get_enqueued_local_size(uint dim) { return __amdgpu_group_size(dim); }

AMDGPU_OCL_INLINE size_t get_global_size(uint dim) {
    if (dim >= 3) return 1;
    return (size_t)__amdgpu_block_count(dim) * __amdgpu_group_size(dim) + __amdgpu_remainder(dim);
}

AMDGPU_OCL_INLINE size_t get_global_id(uint dim) {
    return get_group_id(dim) * __amdgpu_group_size(dim) + get_local_id(dim);
}

/* --- synchronization ---------------------------------------------------------------- */
/* Work-group barrier: release what this work-item wrote, wait for the group, then acquire. */
AMDGPU_OCL_INLINE void barrier(uint flags) {
    (void)flags;
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

AMDGPU_OCL_INLINE void mem_fence(uint flags) {
    (void)flags;
    __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup");
}

/* --- atomics (OpenCL 1.x names: relaxed, return the old value) ----------------------- */
#define AMDGPU_OCL_ATOMIC_RMW(NAME, BUILTIN)                                                 \
    AMDGPU_OCL_OVERLOAD int NAME(volatile __global int *p, int v) {                          \
        return BUILTIN((__global int *)p, v, __ATOMIC_RELAXED);                              \
    }                                                                                        \
    AMDGPU_OCL_OVERLOAD uint NAME(volatile __global uint *p, uint v) {                       \
        return BUILTIN((__global uint *)p, v, __ATOMIC_RELAXED);                             \
    }                                                                                        \
    AMDGPU_OCL_OVERLOAD int NAME(volatile __local int *p, int v) {                           \
        return BUILTIN((__local int *)p, v, __ATOMIC_RELAXED);                               \
    }                                                                                        \
    AMDGPU_OCL_OVERLOAD uint NAME(volatile __local uint *p, uint v) {                        \
        return BUILTIN((__local uint *)p, v, __ATOMIC_RELAXED);                              \
    }

AMDGPU_OCL_ATOMIC_RMW(atomic_add, __atomic_fetch_add)
AMDGPU_OCL_ATOMIC_RMW(atomic_sub, __atomic_fetch_sub)
AMDGPU_OCL_ATOMIC_RMW(atomic_max, __atomic_fetch_max)
AMDGPU_OCL_ATOMIC_RMW(atomic_min, __atomic_fetch_min)
AMDGPU_OCL_ATOMIC_RMW(atomic_and, __atomic_fetch_and)
AMDGPU_OCL_ATOMIC_RMW(atomic_or, __atomic_fetch_or)
AMDGPU_OCL_ATOMIC_RMW(atomic_xor, __atomic_fetch_xor)
AMDGPU_OCL_ATOMIC_RMW(atomic_xchg, __atomic_exchange_n)

#define AMDGPU_OCL_ATOMIC_UNARY(NAME, BUILTIN)                                               \
    AMDGPU_OCL_OVERLOAD int NAME(volatile __global int *p) {                                 \
        return BUILTIN((__global int *)p, 1, __ATOMIC_RELAXED);                              \
    }                                                                                        \
    AMDGPU_OCL_OVERLOAD uint NAME(volatile __global uint *p) {                               \
        return BUILTIN((__global uint *)p, 1u, __ATOMIC_RELAXED);                            \
    }                                                                                        \
    AMDGPU_OCL_OVERLOAD int NAME(volatile __local int *p) {                                  \
        return BUILTIN((__local int *)p, 1, __ATOMIC_RELAXED);                               \
    }                                                                                        \
    AMDGPU_OCL_OVERLOAD uint NAME(volatile __local uint *p) {                                \
        return BUILTIN((__local uint *)p, 1u, __ATOMIC_RELAXED);                             \
    }

AMDGPU_OCL_ATOMIC_UNARY(atomic_inc, __atomic_fetch_add)
AMDGPU_OCL_ATOMIC_UNARY(atomic_dec, __atomic_fetch_sub)

#define AMDGPU_OCL_ATOMIC_CMPXCHG(AS, T)                                                     \
    AMDGPU_OCL_OVERLOAD T atomic_cmpxchg(volatile AS T *p, T expected, T desired) {          \
        T old = expected;                                                                    \
        __atomic_compare_exchange_n((AS T *)p, &old, desired, 0, __ATOMIC_RELAXED,           \
                                    __ATOMIC_RELAXED);                                       \
        return old;                                                                          \
    }

AMDGPU_OCL_ATOMIC_CMPXCHG(__global, int)
AMDGPU_OCL_ATOMIC_CMPXCHG(__global, uint)
AMDGPU_OCL_ATOMIC_CMPXCHG(__local, int)
AMDGPU_OCL_ATOMIC_CMPXCHG(__local, uint)

/* --- a few math helpers ------------------------------------------------------------- */
AMDGPU_OCL_OVERLOAD float fmax(float a, float b) { return __builtin_fmaxf(a, b); }
AMDGPU_OCL_OVERLOAD float fmin(float a, float b) { return __builtin_fminf(a, b); }
AMDGPU_OCL_OVERLOAD float fabs(float a) { return __builtin_fabsf(a); }
AMDGPU_OCL_OVERLOAD float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
AMDGPU_OCL_OVERLOAD int max(int a, int b) { return a > b ? a : b; }
AMDGPU_OCL_OVERLOAD int min(int a, int b) { return a < b ? a : b; }
AMDGPU_OCL_OVERLOAD uint max(uint a, uint b) { return a > b ? a : b; }
AMDGPU_OCL_OVERLOAD uint min(uint a, uint b) { return a < b ? a : b; }

#endif /* AMDGPU_DIRECT_OPENCL_H */
