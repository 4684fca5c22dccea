"""Small readers for files under a probe's root; a missing or garbled file reads as None."""

from __future__ import annotations

from pathlib import Path


def under(root: Path, path: str) -> Path:
    """``path`` (absolute, as on a real machine) resolved inside ``root``."""
    return root / path.lstrip("/")


def read_text(root: Path, path: str) -> str | None:
    try:
        return under(root, path).read_text(errors="replace")
    except (OSError, ValueError):
        return None


def read_line(root: Path, path: str) -> str | None:
    text = read_text(root, path)
    return text.strip() if text is not None else None


def read_int(root: Path, path: str, base: int = 10) -> int | None:
    text = read_line(root, path)
    try:
        return int(text, base) if text else None
    except ValueError:
        return None


def list_dir(root: Path, path: str) -> list[str]:
    try:
        return sorted(p.name for p in under(root, path).iterdir())
    except OSError:
        return []
