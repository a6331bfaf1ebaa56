"""What the benchmark commands beside this folder share: servers, clients, bodies, load, CPU
accounting, and benchmark.py's scenarios (one per figure) and report. The commands import only
this package, the service and libraries, never one another. Run from ``deploy/bench`` on
``sys.path`` (as the commands do).
"""
