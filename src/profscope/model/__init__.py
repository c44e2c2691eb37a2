"""Model layer: the format-agnostic types the tools consume (runs, trace columns,
allocator events, memory events, snapshots, buffer assignments, the HloProto); the
format readers produce them."""
