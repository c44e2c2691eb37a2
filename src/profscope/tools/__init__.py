"""Tools layer: one module per tool and view, each turning model objects into a JSON-able
payload.

Tools know nothing of file formats, the cache or HTTP. Which tools exist, what they
take and which runs each one is for is the application's tool table
(:mod:`profscope.app.tool_table`).
"""
