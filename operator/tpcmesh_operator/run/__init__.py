"""Running one TransferRun, Kubernetes-free: from a frozen spec to delivered measurements.

- ``executor``: ``RunExecutor`` (its docstring is the interface, shared with the lab's local mode);
- ``ports``: what the executor is given and reports (status store, agent directory, options, progress);
- ``driver``: what the TransferRun handlers do (the daemon that runs the executor; the last delivery);
- ``agents``: the client of the agents' control API; ``probing``: a pair's RTT/path probe;
- ``status``, ``statusbudget``, ``outbox``: the run's status as bookkeeping, its byte budget, the measurements
  the dashboard has not acknowledged (all pure);
- ``measurements``, ``batch``: the contract's rows and ingest batches (pure); ``delivery``: posting them.
- ``hosttelemetry``: the source agent's host summary added to a measurement after its test.
- ``meshhealth``: the MeshHealthy condition of a finished run, from the dashboard's open problems.
- ``lossprobe``: spec.lossProbe kept running between runs: the agents' loss-probe configuration, their summaries
  collected into the dashboard.
"""
