"""The lab (`tpcmesh-local`): a measured mesh on one machine, no cluster; optional WAN emulation; Kubernetes on one
machine, the PostgreSQL launcher, the benches. A tool for developers and demos: the product never imports it."""
