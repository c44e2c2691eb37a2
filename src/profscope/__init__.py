"""profscope: a self-hosted, XProf-style profile viewer for ML workloads."""

__version__ = "0.1.0"
