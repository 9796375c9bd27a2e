"""Test settings: the environment-driven settings with a fixed secret key (tests only; the real settings have
none), fast password hashing and no static manifest."""

import os

from config.settings import *  # noqa: F403

SECRET_KEY = "tpcmesh-tests-only-not-a-secret"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Analysis inside the ingest request: a test reads the changes and problems as soon as ingest answered (and no
# thread outlives a test's database).
ANALYSIS = os.environ.get("TPCMESH_DASHBOARD_ANALYSIS", "inline")
