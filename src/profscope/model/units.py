"""Quantities said in words, the same everywhere: a tool's messages, the report and the
pages print one number the same way."""

from __future__ import annotations

__all__ = ["fmt_bytes"]


def fmt_bytes(n) -> str:
    """Bytes in binary units with the rule of the pages' fmtBytes (lib/format.js): an
    integer below 1 KiB, else two decimals under 10 and one above ("845.1 KiB", "1.81
    MiB"), so the report and every message read the number the page shows."""
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}" if abs(n) < 10 else f"{n:.1f} {unit}"
        n /= 1024
    return ""
