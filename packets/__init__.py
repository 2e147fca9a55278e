"""AQL packets: layouts (hsa.h, hsa_ext_amd.h incl. gfx1250's extended dispatch), checked
builders, batch builders, decoder, ring publishing
and trace records. Imports nothing of the project but `ground`.

    import packets
    pkt = packets.kernel_dispatch(workgroup_size=256, grid_size=1 << 20,
                                  kernel_object=kd, kernarg_address=args)
    packets.format_packet(pkt)          # one line of text
    ring = packets.Ring(q.ring, q.size, q.load_write_index, q.add_write_index,
                        q.load_read_index, q.doorbell, queue_id=q.id)
    ring.publish(pkt)
"""

from . import trace
from .batch import (
    agent_dispatch_batch,
    barrier_and_batch,
    barrier_or_batch,
    barrier_value_batch,
    ext_kernel_dispatch_batch,
    kernel_dispatch_batch,
)
from .build import (
    agent_dispatch,
    barrier_and,
    barrier_or,
    barrier_value,
    ext_dispatch_check,
    ext_kernel_dispatch,
    header_word,
    invalid,
    kernel_dispatch,
)
from .decode import (
    DISPATCH_KINDS,
    decode,
    decode_many,
    encode,
    format_packet,
    format_packets,
    packet_bytes,
)
from .layout import (
    AGENT_DISPATCH,
    BARRIER_AND,
    BARRIER_OR,
    BARRIER_VALUE,
    EXT_KERNEL_DISPATCH,
    INVALID_HEADER,
    KERNEL_DISPATCH,
    MAX_DEP_SIGNALS,
    MAX_WORKGROUP_PRODUCT,
    PACKET,
    PACKET_SIZE,
    AmdVendorFormat,
    BarrierValueCondition,
    FenceScope,
    PacketType,
    decode_header,
    decode_setup,
    dtype_for,
    encode_header,
    encode_setup,
)
from .ring import Ring, invalidate_slots
from .trace import (
    MemorySink,
    TraceWriter,
    active_sink,
    read_trace,
    set_sink,
)

__all__ = [
    "AGENT_DISPATCH", "BARRIER_AND", "BARRIER_OR", "BARRIER_VALUE", "DISPATCH_KINDS",
    "EXT_KERNEL_DISPATCH", "INVALID_HEADER", "ext_dispatch_check", "ext_kernel_dispatch",
    "ext_kernel_dispatch_batch",
    "KERNEL_DISPATCH", "MAX_DEP_SIGNALS", "MAX_WORKGROUP_PRODUCT", "PACKET", "PACKET_SIZE",
    "AmdVendorFormat", "BarrierValueCondition", "FenceScope", "MemorySink", "PacketType",
    "Ring", "TraceWriter", "active_sink", "agent_dispatch", "agent_dispatch_batch",
    "barrier_and", "barrier_and_batch", "barrier_or", "barrier_or_batch", "barrier_value",
    "barrier_value_batch", "decode", "decode_header", "decode_many", "decode_setup",
    "dtype_for", "encode", "encode_header", "encode_setup", "format_packet", "format_packets",
    "header_word", "invalid", "invalidate_slots", "kernel_dispatch", "kernel_dispatch_batch",
    "packet_bytes", "read_trace", "set_sink", "trace",
]
