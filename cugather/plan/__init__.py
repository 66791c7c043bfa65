"""Plans: everything a launch needs that depends only on geometry (pure Python).

``core`` holds what every plan shares; ``gather``, ``elements`` and ``nd``
plan one operator each; ``keys`` names kernels and describes their kinds,
``layout`` mirrors their argument structs, ``fastdiv`` computes the division
magic numbers, ``tuning`` holds the constants CUDA and Python share.
"""
