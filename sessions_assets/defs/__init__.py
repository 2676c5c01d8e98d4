"""This project's own instance of ``SessionsComponent`` (``defs.yaml``), loaded by ``definitions.py``."""
