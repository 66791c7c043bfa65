"""Jinja2 templates of cugather (package data)."""
