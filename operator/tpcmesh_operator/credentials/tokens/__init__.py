"""Bearer tokens for third-party copy: the operator as a WLCG JWT issuer.

``claims`` builds and checks the claims (pure), ``keyring`` decides which signing key is active and which public keys
the JWKS still publishes (pure), ``issuer`` signs with PyJWT, ``server`` publishes the OpenID discovery document and
the JWKS over HTTPS (the only I/O).
"""
