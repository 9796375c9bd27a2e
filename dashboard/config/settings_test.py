"""Test settings: the environment-driven settings with a fixed secret key (tests only; the real settings have
none), fast password hashing and no static manifest."""

from config.settings import *  # noqa: F403

SECRET_KEY = "tpcmesh-tests-only-not-a-secret"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
