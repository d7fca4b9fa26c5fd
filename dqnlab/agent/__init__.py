"""The agent: what a DQN is, independent of how its data is collected.

``networks`` (the torch Q-network and its flat parameter vector), ``policy`` (the same Q-function in
numpy, for actors and evaluation), ``learner`` (the only writer of the parameters: the DQN update,
target network, resets), ``diagnostics`` (pure maths: srank, dormant units, divergence, Q
statistics, overestimation), ``collapse`` (the collapse signs on the probe batch), ``evaluation``
(greedy episodes).
"""
