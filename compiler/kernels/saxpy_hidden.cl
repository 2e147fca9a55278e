/* saxpy_hidden: y = a * x + y with a grid-stride loop whose stride comes from the hidden
 * arguments: get_local_size (hidden group size) times get_num_groups (hidden block count). */
__kernel void saxpy_hidden(__global float *y, __global const float *x, float a, uint n) {
    size_t stride = get_local_size(0) * get_num_groups(0);
    for (size_t i = get_global_id(0); i < n; i += stride) {
        y[i] = a * x[i] + y[i];
    }
}
