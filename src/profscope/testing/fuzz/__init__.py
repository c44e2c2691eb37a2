"""The fuzz suite of issue 13: seeded mutators per input format (``mutators``), tiny
hand-written reproducers of each finding (``reproducers``), a reader worker that feeds
mutants straight into the readers (``reader_worker``, run as a separate process so that
it can point at any checkout of profscope) and a driver that also sends them through a
real ``profscope serve`` (``driver``). ``scripts/fuzz_campaign.py`` prints the table;
``tests/test_fuzz.py`` is the bounded CI run. The driver needs httpx (the ``test``
extra)."""
