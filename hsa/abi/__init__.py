"""The AMDGPU ABI below the HSA layer: the code-object reader (ELF, kernel descriptors,
metadata) and the target table (gfx names, target ids, wave sizes, features).

As in IREE's runtime, this is ABI, not compiler: the HSA providers read code objects
with it, and `compiler` builds on it. It imports nothing of the project but
`ground`.
"""
