/* fill: out[i] = value for i < n. */
__kernel void fill(__global float *out, float value, uint n) {
    size_t i = get_global_id(0);
    if (i < n) out[i] = value;
}
