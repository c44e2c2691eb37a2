"""Builders that lay out realistic, deterministic input trees for tests."""
