"""Fireside's window (PySide6): a Qt face on the Qt-free core in ``app.core``."""
