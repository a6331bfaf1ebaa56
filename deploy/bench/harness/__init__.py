"""The benchmark's parts: servers, load, CPU accounting, scenarios (one per figure), report.

``benchmark.py`` beside this folder is the command; ``scale.py`` and ``micro.py`` reuse the
runner and the servers. Run from ``deploy/bench`` on ``sys.path`` (as the commands do).
"""
