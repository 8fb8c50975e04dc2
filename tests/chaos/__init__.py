"""The chaos suite (issue 9 §6): real processes, seeded faults, invariants from the stores."""
