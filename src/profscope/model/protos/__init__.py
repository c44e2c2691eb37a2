"""Generated protobuf modules whose messages are profscope's model.

``hlo_pb2``: a subset of ``xla.HloProto`` (XLA dumps' ``*.hlo.pb``, the HLO protos a
profile embeds) and ``MemoryUsageReportProto``. The compiled module's ``HloProto`` is the
memory viewer's model: it is what XLA itself calls the module, so no second copy is made
(docs/architecture.md). Generated from ``protos/hlo.proto`` by ``scripts/gen_protos.py``
and committed; do not edit it. See docs/protos.md.
"""
