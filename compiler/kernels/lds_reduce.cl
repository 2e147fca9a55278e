/* lds_reduce: each work-group of 256 work-items sums 256 floats of `in` in LDS (tree
 * reduction with barriers) and writes its partial sum to out[group]; work-item 0 of each
 * group also adds 1 to *groups_done atomically. Launch with block = 256. */
#define LDS_REDUCE_GROUP 256

__kernel __attribute__((reqd_work_group_size(LDS_REDUCE_GROUP, 1, 1)))
void lds_reduce(__global float *out, __global const float *in, uint n,
                __global uint *groups_done) {
    __local float partial[LDS_REDUCE_GROUP];
    uint lid = (uint)get_local_id(0);
    size_t gid = get_global_id(0);
    partial[lid] = gid < n ? in[gid] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint span = LDS_REDUCE_GROUP / 2; span > 0; span >>= 1) {
        if (lid < span) partial[lid] += partial[lid + span];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        out[get_group_id(0)] = partial[0];
        atomic_inc(groups_done);
    }
}
