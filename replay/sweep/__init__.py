"""What-if sweeps: many variants of one recorded log, each an independent task.

`spec` reads a sweep file (a list or a grid of overlays), `task` replays one variant,
`executors` runs tasks here or on Dask (a LocalCluster or an existing cluster), `run` ties
them together and `rank` orders the results by chosen metrics. docs/whatif.md, "Sweeps".
"""
