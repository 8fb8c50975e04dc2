"""The owner core: every scheduling decision as events in, effects out (sans-I/O).

It holds no thread, clock, socket or store; its driver (``appliance.runner.loop``) and the
whole-system simulator (``appliance.sim.system``) feed it events and carry out its effects.
``owner`` holds the contract (who feeds which event, what each effect asks of the driver).
"""
