"""Generated protobuf modules for the wire formats profscope's readers parse.

``xplane_pb2``: XSpace profiles (``*.xplane.pb``). Generated from ``protos/xplane.proto``
by ``scripts/gen_protos.py`` and committed; do not edit it. ``hlo_pb2`` (the HloProto, the
memory viewer's model) lives in :mod:`profscope.model.protos`. See docs/protos.md.
"""
