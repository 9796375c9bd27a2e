"""Planning, pure: no I/O, no kopf, no Kubernetes client.

- ``spec``: a TransferBenchmark's spec parsed into frozen dataclasses (``parse_spec``; errors are ``SpecError``,
  from ``specerror``, naming the field);
- ``schedule``: when runs are due;
- ``planner``: agents + spec -> the ordered tests in rounds where no agent is in two tests at once;
- ``siterounds``: site-exclusive rounds, an edge colouring of the site multigraph;
- ``optimizer``: spec.optimize, each link's streams x files from the dashboard's advice (the question is asked
  through a function the executor gives it);
- ``maintenance``: the nodes and pairs a run leaves out;
- ``lossprobe``: spec.lossProbe, each agent's peers and the merge of several benchmarks' probes on one agent.
"""
