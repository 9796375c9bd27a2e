"""Certificates and tokens.

- ``pki``: X509 for tpcmesh (a CA, host certificates for the agents), with ``cryptography``;
- ``signer``: the operator as the agents' CA: approves and signs their CertificateSigningRequests (main.py registers
  the handlers);
- ``tokens``: the bearer-token issuer (in-cluster or a site's external one) and the minting of each transfer's
  read and create tokens.
"""
