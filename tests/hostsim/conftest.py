"""Run the host tier's coverage assertion after every other test of the session.

Tests marked ``hostsim_coverage`` move to the end of the run, so the keys
launched by every host-tier test file (whatever its name) are counted.
"""


def pytest_collection_modifyitems(config, items):
    last = [item for item in items if item.get_closest_marker("hostsim_coverage")]
    if last:
        items[:] = [item for item in items if not item.get_closest_marker("hostsim_coverage")] + last
