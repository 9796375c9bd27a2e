"""TWAMP-light (RFC 5357 unauthenticated test packets, reflector as in its Appendix I): the always-on loss, delay
and jitter probes between agents.

- ``codec``: the packets, pure (parse and build, no I/O);
- ``summary``: a period's packets of one peer -> loss, duplicates, reordering, RTT, one-way delay, IPDV; pure;
- ``clock``: the local clock's synchronisation state (the kernel's ``adjtimex``);
- ``reflector`` / ``sender``: the UDP endpoints (asyncio, both address families, kernel receive timestamps);
- ``outbox``: finished summaries kept until a collector acknowledges them (bounded);
- ``service``: one agent's probe: its reflector, its senders and the periodic summaries.
"""
