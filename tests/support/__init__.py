"""Helpers the test tiers share: references, case generators, fakes.

``reference`` (numpy.take / ONNX Gather), ``reference_elements_nd``
(GatherElements / GatherND), ``quantized_reference`` (GatherBlockQuantized)
and ``onnx_cases`` are the independent references; ``fuzzcases`` and
``fuzzcheck`` the property-based cases and their checks; ``distributed_fake``
an in-process communicator; ``jit`` and ``gpu`` what the NVRTC and GPU tiers
share.  ``tests/`` is on ``sys.path`` through ``pythonpath`` in
pyproject.toml's ``[tool.pytest.ini_options]``; scripts run outside pytest
(tests/tools, tests/gpu/distributed_worker.py) put it there themselves.
"""
