"""The family-neutral ISA core of the virtual AMD system.

Wide-wave scheduling (divergence, reconvergence, barriers), wave state, memory spaces and
the semantics of scalar, vector, packed and memory instructions keyed by canonical
mnemonics. A family package (hsa.virtual.gfx11, hsa.virtual.gfx9, ...) supplies the
decoder, its opcode tables and its quirks, and registers an executor built on this core.
"""
