"""Tools layer: one module per tool, each turning model objects into a JSON-able payload.

Tools know nothing of file formats or HTTP. :mod:`profscope.tools.registry` says which
tools exist and which runs each one applies to.
"""
