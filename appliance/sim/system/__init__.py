"""The whole-system deterministic simulator (``python -m appliance.sim.system``): world.py."""
