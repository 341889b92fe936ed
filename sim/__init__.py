"""MoE pipeline-parallel training co-simulator: schedules as data, a SimPy engine, a flow-level
network, metrics and pictures."""
__version__ = "0.1.0"
