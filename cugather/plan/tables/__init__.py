"""The tuning tables shipped with cugather: one JSON file per GPU architecture
(``sm_90.json``...), read by :mod:`cugather.plan.table`."""
