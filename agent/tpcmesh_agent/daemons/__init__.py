"""The protocol servers (XRootD HTTP-TPC and root://, GridFTP, iperf3) the agent runs and watches."""

from .supervisor import ServerSupervisor

__all__ = ["ServerSupervisor"]
