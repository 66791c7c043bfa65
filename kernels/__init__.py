"""CUDA headers of cugather (package data)."""
