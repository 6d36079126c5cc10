"""Pydantic request and response models; the only place pydantic meets the core."""
