"""The policy core: calendar, definitions, selection, occurrence state machine, checkpoint.

Sans-I/O: nothing here reads a clock, the environment, a socket or a file, starts a thread or
draws randomness. Time arrives as arguments; decisions leave as return values.
"""
