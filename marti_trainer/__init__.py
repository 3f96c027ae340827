"""marti_trainer: the RL harness that trains the agents of marti_env workflows.

Its layers and the job of each module: docs/architecture.md.
"""
