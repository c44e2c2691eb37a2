"""Formats layer: one module per input format. Bytes in, plain Python / protos out.

Modules here know nothing about tools or HTTP; they read what a file says and raise
:class:`profscope.errors.BadInput` naming the file when it cannot be read.
"""
