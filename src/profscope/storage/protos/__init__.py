"""Generated protobuf modules for the messages a capture exchanges with a running job's
profiler server.

``profiler_service_pb2``: ``ProfileRequest``/``ProfileResponse`` and the continuous-mode
messages of ``tsl/profiler/protobuf/profiler_service.proto``. Generated from
``protos/profiler_service.proto`` by ``scripts/gen_protos.py`` and committed; do not edit
it. See docs/protos.md.
"""
