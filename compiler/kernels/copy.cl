/* copy: dst[i] = src[i] for i < n (32-bit words). */
__kernel void copy(__global uint *dst, __global const uint *src, uint n) {
    size_t i = get_global_id(0);
    if (i < n) dst[i] = src[i];
}
