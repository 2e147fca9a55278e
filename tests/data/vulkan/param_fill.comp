// param_fill: out[i] = value for i < n, the Vulkan twin of the library's OpenCL `fill`
// (out, value, n), with value and n as push constants (the descriptors ABI: binding i of
// set 0, then 32-bit constants). Built with glslang-tools 12.0.0 (Debian bookworm):
//   glslangValidator -V --target-env vulkan1.1 -o param_fill.spv param_fill.comp
#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer Out { float data[]; } outbuf;
layout(push_constant) uniform Constants { float value; uint n; } pc;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) outbuf.data[i] = pc.value;
}
