"""Test fixture: a plugin module that cannot be imported (discovery reports "import error")."""

from __future__ import annotations

raise ImportError("accel_broken_import needs a library that is not installed (a deliberately broken test fixture)")
