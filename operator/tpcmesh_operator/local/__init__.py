"""The local mode (`tpcmesh-local`): a measured mesh on one machine, no cluster; optional WAN emulation."""
