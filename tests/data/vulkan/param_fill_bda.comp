// param_fill_bda: param_fill (out[i] = value for i < n) on the bda ABI: push constants
// hold the binding table's address (u64), padding to 32 bytes (IREE's 8 root dwords), then
// the 32-bit constants. Built with glslang-tools 12.0.0 (Debian bookworm):
//   glslangValidator -V --target-env vulkan1.2 -o param_fill_bda.spv param_fill_bda.comp
#version 450
#extension GL_EXT_buffer_reference : require
layout(local_size_x = 64) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float data[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Table { Floats b[]; };
layout(push_constant) uniform Constants { Table table; uint pad[6]; float value; uint n; } pc;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) pc.table.b[0].data[i] = pc.value;
}
